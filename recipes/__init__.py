"""Reference pipelines that detaudit audits (see recipes/*.toml for their cards)."""
