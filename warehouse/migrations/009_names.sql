-- 009_names: one spelling of interval bounds, ci_low / ci_high, as quality_deltas has had since 003
-- (issue #14). perf_summary's *_ci_lo / *_ci_hi are renamed in place (values kept); Parquet parts
-- written before are read under the new names (warehouse/contract.py RENAMED). v_tradeoff's
-- tps_mean / tps_peak became best_output_tok_s / peak_output_tok_s in the view itself.

alter table perf_summary rename column ttft_ms_mean_ci_lo to ttft_ms_mean_ci_low;
alter table perf_summary rename column ttft_ms_mean_ci_hi to ttft_ms_mean_ci_high;
alter table perf_summary rename column ttft_ms_p99_ci_lo to ttft_ms_p99_ci_low;
alter table perf_summary rename column ttft_ms_p99_ci_hi to ttft_ms_p99_ci_high;
alter table perf_summary rename column output_throughput_ci_lo to output_throughput_ci_low;
alter table perf_summary rename column output_throughput_ci_hi to output_throughput_ci_high;
alter table perf_summary rename column ttft_cv_pct_ci_lo to ttft_cv_pct_ci_low;
alter table perf_summary rename column ttft_cv_pct_ci_hi to ttft_cv_pct_ci_high;
alter table perf_summary rename column itl_cv_pct_ci_lo to itl_cv_pct_ci_low;
alter table perf_summary rename column itl_cv_pct_ci_hi to itl_cv_pct_ci_high;
alter table perf_summary rename column ttft_cv_pct_median_ci_lo to ttft_cv_pct_median_ci_low;
alter table perf_summary rename column ttft_cv_pct_median_ci_hi to ttft_cv_pct_median_ci_high;
alter table perf_summary rename column itl_cv_pct_median_ci_lo to itl_cv_pct_median_ci_low;
alter table perf_summary rename column itl_cv_pct_median_ci_hi to itl_cv_pct_median_ci_high;
