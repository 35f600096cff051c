"""The datapath layer: the only code that writes to the kernel's datapath, and the lanes policy model.

What is here: the lanes policy and its pure reference classifier (`policy`, `classify`), the ctypes mirror of
bpf/lanes.h (`abi`), bpf(2) through ctypes (`bpf_sys`), the bcc loader that compiles bpf/*.bpf.c and pins
programs and maps (`loader`), the pinned maps (`maps`: compile a policy into entries, sync them, read
counters), the `tc` wrapper for the HTB tree and the cls_bpf filter (`tc`), the rates written into them
(`rates`), the apply/remove lifecycle and its state files (`lanes`) and `aiops lanes status` (`status`).

It may import only `aiops.errors` and its own modules (and third-party libraries; bcc only lazily, in the
loader). Nothing from aiops.control, aiops.sim, aiops.store, collectors or guardrails: those build on it
(the controller actuates through it, collectors read its maps, the twin runs its `classify`), never the
reverse.
"""
