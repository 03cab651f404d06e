"""Use cases: record, verify, trace and suite runs. Each returns a result object; the CLI
renders it."""
