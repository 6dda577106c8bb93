"""`wva-adapter replay`: run the decision engine over recorded snapshots and check expectations."""
