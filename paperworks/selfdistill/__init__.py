"""Reference-anchored Rényi on-policy self-distillation (SR-OPSD), paper 04."""
