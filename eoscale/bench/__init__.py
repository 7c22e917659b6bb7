"""Benchmarks: programs that measure eoscale against a baseline run in the same process on the same data,
print the figures as ratios, and record them with the machine they ran on (`benchmarks/`)."""
