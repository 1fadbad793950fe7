"""Reading the store: baselines, run values, statistics, compare, fleet outliers and trends. No ray, no torch."""
