"""What every ROME-family method shares: the edit key, context templates, the value objective and
its success rule, the layer statistics and the rank-one update (ROME's own ``rome/`` package holds the same).
"""
