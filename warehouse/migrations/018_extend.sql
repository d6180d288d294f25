-- 018_extend: a fixed step whose SLO percentile claim lacked requests gets more repeats, within
-- decision.extend.budget_s, and every look at its claim is judged at 1 - (1 - confidence) / slo_looks (Bonferroni
-- over the planned looks; tasks/decision/extend.py). v_slo_steps reads slo_looks; NULL (older runs) is one look.
-- Columns are appended in the order of warehouse/contract.py.

alter table perf_summary add column slo_looks bigint;         -- most looks at the step's claim (1: no extension)
alter table perf_summary add column repeats_added bigint;     -- repeats added to gather what the claim lacked
alter table perf_summary add column extend_note varchar;      -- what the extension did, or why not more
