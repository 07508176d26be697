DROP TABLE IF EXISTS fencekit_guard_marks;
