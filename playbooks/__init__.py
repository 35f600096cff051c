"""The playbooks: one YAML file per root-cause label (signature, checks, safe remediations), shipped as package
data and read by `aiops.playbooks`. No code lives here."""
