"""The eval suite (evals/scenarios/*.yaml) and its scoring harness (`aiops eval`)."""
