-- 020_interleave: which variants' perf sweeps ran in interleaved rounds with this one (perf.interleave; round r of
-- each before round r + 1 of any, tasks/perf/rounds.py). NULL: the variant's perf was measured on its own.
-- Columns are appended in the order of warehouse/contract.py.

alter table perf_summary add column interleaved_with varchar;  -- the other variants of the rounds, comma-separated
