"""Students: plan and train one (amalgamate, extend), evaluate it, predict with it."""
