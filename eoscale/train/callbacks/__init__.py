"""Lightning callbacks of every run: the MLflow monitor (with its params and figures), the last checkpoint, model
registration, step timing, a fit held to its time budget
(`budget`) and profiling."""
