"""The static ootci dashboard: RunRecords in, plain files for GitHub Pages out.

Reads only RunRecord JSON (runner.models); never imports torch.
"""
