-- 021_rank_rounds: rounds added to an interleaved night's closed-loop steps while the variants' ranking was not
-- settled (decision.extend.rank_budget_s; tasks/decision/ranking.py), and what its looks found. 0 / NULL: none added,
-- or a night that was not asked to settle its ranking.
-- Columns are appended in the order of warehouse/contract.py.

alter table perf_summary add column rounds_added bigint;   -- rounds added while the ranking was unsettled
alter table perf_summary add column rank_note varchar;     -- each look's reading of the ranking, and what was done
