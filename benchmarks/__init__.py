"""`make bench`: speed and memory benchmarks that print ratios measured side by side in one run."""
