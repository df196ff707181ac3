"""User data: text datasets, BIO-tagged token datasets, People's Daily, entity spans."""
