"""Deterministic control: the lanes' control laws, forecast and adaptive controller (which actuates through
aiops.datapath; the datapath never imports control), and the power and thermal managers."""
