"""The product's memory of components across days: what failed on a GPU or a node, why, what was done about it
and whether it held (`history.component_history`), and the lemon score that ranks which to take out of service
(`lemon`). Read from the workspace's own records (incidents and their top hypotheses, executed proposals, the
closed loop's outcomes and recurrence links where present); nothing here writes."""
