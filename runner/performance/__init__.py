"""Performance over a backend's history: the bench stage's instruction counts and device times
as series over its main-line runs, and the changes in them told from noise.

Owns reading each measurement's counts and times out of a backend's main-line runs, in time
order (`series`); finding the nights a count series stepped (`steps`, standard library only);
finding the points where a device-time series changed (`changes`: E-divisive means with a
permutation test, from MongoDB's signal-processing-algorithms, the optional `perf` extra);
the open regressions of both (`regressions`) and a PR run against the nightlies (`baseline`).
May import `records`, `core` and `models`.
"""
