-- 010_slo_claims: claims a sample supports (issue #24, the perf half). perf_summary's CVs pooled over every
-- repeat's requests mix prompt-length spread and run-to-run drift with jitter: renamed *_pooled (values kept;
-- the jitter figures are the per-repeat *_cv_pct_median columns), and their cluster-bootstrap intervals, which
-- under-covered (68-87 % at 2-5 repeats, docs/statistics.md), dropped. ttft_ms_p99_ci_low/_high keep their
-- names and, from this version on, hold a distribution-free order-statistic interval of the p99 (rows loaded
-- before keep the old t-interval; ci_method says which). The completed request rate gets its interval.
-- Parquet parts written before are read under the new names (warehouse/contract.py RENAMED).

alter table perf_summary rename column ttft_cv_pct to ttft_cv_pct_pooled;
alter table perf_summary rename column itl_cv_pct to itl_cv_pct_pooled;
alter table perf_summary drop column ttft_cv_pct_ci_low;
alter table perf_summary drop column ttft_cv_pct_ci_high;
alter table perf_summary drop column itl_cv_pct_ci_low;
alter table perf_summary drop column itl_cv_pct_ci_high;
alter table perf_summary add column request_throughput_ci_low double;     -- req/s, t-interval over the repeats
alter table perf_summary add column request_throughput_ci_high double;    -- req/s
