"""The forward-only machinery: the prefix state of an edit, the suffix graphs the value search runs,
the eager quantized copy and the paging of layers the search never runs.
"""
