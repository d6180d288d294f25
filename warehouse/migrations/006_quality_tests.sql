-- 006_quality_tests: exact tests and Holm's adjustment for quality deltas (issue #15). Columns are
-- appended in the order of warehouse/contract.py; old columns keep their names.
--
-- From this version `p_value` is the raw two-sided p of the row's own test: exact McNemar
-- (scipy's binomial test) for 0/1 scores, a paired sign-flip permutation test for other
-- statistics (tasks/core/stat_tests.py); `ci_low`/`ci_high` are Tango's score interval (0/1 scores)
-- or a BCa bootstrap interval. Rows loaded before this migration have NULL in the new columns.

-- Holm's step-down adjustment of p_value over the family: every row of the same (run_id,
-- variant) that carries a p_value. The verdict uses this p.
alter table quality_deltas add column p_value_adjusted double;
-- Number of tests in that family (the m of Holm's adjustment).
alter table quality_deltas add column p_family_size integer;
