-- 011_quality_gate: the quality gate's bounds, stored with each quality delta (issue #24, items 3 and 4).
-- Columns are appended in the order of warehouse/contract.py. Rows loaded before this migration have
-- NULL bounds: v_quality_gate leaves them undecided ('no gate bound recorded') rather than re-deriving
-- a bound from an interval that may be the old [0, 0] of a sample where no pair differed.

-- 0/1 metrics: discordant pairs (the reference right and the variant wrong, and the reverse); an
-- errored request counts as a wrong answer.
alter table quality_deltas add column n_lost integer;
alter table quality_deltas add column n_gained integer;
-- The delta interval as retention (tasks/decision/gate.py: retention_interval): the gate's bounds.
alter table quality_deltas add column retention_ci_low double;
alter table quality_deltas add column retention_ci_high double;
-- The look the interval was taken at: its own two-sided level, looks taken and planned.
alter table quality_deltas add column look_confidence double;
alter table quality_deltas add column looks integer;
alter table quality_deltas add column looks_planned integer;
-- Identity evidence of a speculative variant whose plain decoding is the reference (greedy_identity).
alter table quality_deltas add column identity_n integer;
alter table quality_deltas add column identity_same integer;
alter table quality_deltas add column identity_flip_high double;
alter table quality_deltas add column identity_retention_low double;
