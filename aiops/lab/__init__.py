"""Network lab: namespaces, veth pairs, cgroups and traffic generators for the lanes (aiops lab net)."""
