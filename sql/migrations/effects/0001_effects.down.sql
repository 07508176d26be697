DROP TABLE IF EXISTS fencekit_effects;
