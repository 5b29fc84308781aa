"""Developer tools and test harnesses (run from the repository root; not installed)."""
