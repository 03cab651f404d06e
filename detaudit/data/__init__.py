"""Pure data and the pure functions over it: cards, metrics files, values, exact and
approximate comparison, exclusion patterns, curve health. No processes, no rendering."""
