"""Deterministic traffic control: the lanes policy, control laws, forecasting and the tc/BPF actuator."""
