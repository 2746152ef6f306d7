"""Streams and events through the device guard (torch.Stream, torch.Event)."""

import pytest


def test_stream_basics(torch):
    s = torch.Stream(device="openreg")
    assert s.device.type == "openreg"
    assert s.query()
    s.synchronize()
    s2 = torch.Stream(device="openreg:1")
    assert s2.device.index == 1


def test_event_record_wait_query(torch):
    s = torch.Stream(device="openreg")
    e = torch.Event(device="openreg")
    e.record(s)
    other = torch.Stream(device="openreg")
    other.wait_event(e)
    e.wait(other)
    assert e.query()
    e.synchronize()


def test_elapsed_time(torch):
    s = torch.Stream(device="openreg")
    start = torch.Event(device="openreg", enable_timing=True)
    end = torch.Event(device="openreg", enable_timing=True)
    start.record(s)
    x = torch.randn(64, 64, device="openreg")
    (x @ x).sum().item()
    end.record(s)
    end.synchronize()
    ms = start.elapsed_time(end)
    assert isinstance(ms, float) and ms >= 0.0


def test_elapsed_time_needs_timing(torch):
    s = torch.Stream(device="openreg")
    a = torch.Event(device="openreg")
    b = torch.Event(device="openreg")
    a.record(s)
    b.record(s)
    with pytest.raises((RuntimeError, ValueError), match="enable_timing"):
        a.elapsed_time(b)


def test_stream_record_event(torch):
    s = torch.Stream(device="openreg")
    e = s.record_event()
    assert e.query()


def test_accelerator_stream_api(torch):
    s = torch.accelerator.current_stream()
    assert s.device.type == "openreg"
    new = torch.Stream(device="openreg")
    torch.accelerator.set_stream(new)
    assert torch.accelerator.current_stream() == new
    torch.accelerator.set_stream(s)
