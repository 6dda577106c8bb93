"""The decaying-histogram recommender (seed 004): replica bounds per variant from the history of its demand."""
