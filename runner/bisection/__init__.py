"""`ootci bisect`: the first bad torch, torch commit or backend commit.

Owns the candidates between a good and a bad point (`bisect_candidates`), where to look next
(`bisect_search`), and the bisection itself, each step an ordinary pipeline run (`bisect`).
May import `stages` and everything below it.
"""
