"""Writing DataFrames to journals: driver-side writers, executor-side tasks and encoding."""
