-- 007_timing: timing proven against a paced server (issue 15): reasoning-aware timing per request
-- (time to the first answer token, reasoning and answer tokens), when each request returned (the
-- measured wall interval), and jitter per repeat of a fixed-length workload (tasks/perf/jitter.py).
-- Columns are appended in the order of warehouse/contract.py. Units as in 001.

alter table perf_requests add column ttft_answer_ms double;            -- ms, send -> first answer (non-reasoning) chunk; NULL: all reasoning
alter table perf_requests add column reasoning_tokens integer;         -- output tokens that were reasoning (0: no reasoning delta)
alter table perf_requests add column answer_tokens integer;            -- output_tokens - reasoning_tokens
alter table perf_requests add column reasoning_tokens_source varchar;  -- usage | tokenizer | approx_chunks
alter table perf_requests add column end_s double;                     -- s, when the request returned (any status), from the scenario's start

alter table perf_summary add column ttft_answer_ms_mean double;        -- ms
alter table perf_summary add column ttft_answer_ms_p50 double;         -- ms
alter table perf_summary add column ttft_answer_ms_p99 double;         -- ms
alter table perf_summary add column total_reasoning_tokens bigint;     -- tokens, ok requests
alter table perf_summary add column total_answer_tokens bigint;        -- tokens, ok requests
alter table perf_summary add column ttft_cv_pct_median double;         -- %, median over repeats of each repeat's TTFT CV
alter table perf_summary add column ttft_cv_pct_median_ci_lo double;   -- %, interval over repeats; NULL below 2
alter table perf_summary add column ttft_cv_pct_median_ci_hi double;   -- %
alter table perf_summary add column itl_cv_pct_median double;          -- %, median over repeats of each repeat's ITL CV
alter table perf_summary add column itl_cv_pct_median_ci_lo double;    -- %
alter table perf_summary add column itl_cv_pct_median_ci_hi double;    -- %
alter table perf_summary add column jitter_note varchar;               -- why a jitter figure or its interval is NULL
