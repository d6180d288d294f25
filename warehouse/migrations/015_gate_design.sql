-- 015_gate_design: the quality gate's design before the evidence (issue 32). Columns are appended in the order of
-- warehouse/contract.py.

-- The paired samples a decision needs under the design in use (fixed, or the adaptive suite's looks), computed
-- exactly in Python for the run's own gate threshold (tasks/decision/design.py); v_quality_gate uses them when
-- the threshold it judges is that one, its normal approximation otherwise (a target given to `tradeoff recommend`).
alter table quality_deltas add column n_needed_threshold double;
alter table quality_deltas add column n_needed_if_equal bigint;
alter table quality_deltas add column n_needed bigint;
-- The gate's power as stated before the run (tradeoff check, the nightly's first log lines).
alter table runs add column gate_plan_json varchar;
