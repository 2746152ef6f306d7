"""Performance over a backend's history: the timing series its bench stages recorded, and the
changes in them told from noise.

Owns reading each measurement's device/CPU ratio out of a backend's main-line runs, in time
order (`series`), and finding the points where a series changed (`changes`: E-divisive means
with a permutation test, from MongoDB's signal-processing-algorithms, the optional `perf`
extra), of which a sustained slowdown is a regression. May import `records`, `core` and `models`.
"""
