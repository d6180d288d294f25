-- 014_ttft_cv_name: one name for one figure (issue 27). v_tradeoff's `jitter_pct` was ttft_cv_pct under a second
-- name and is gone (its ratio is now ttft_cv_ratio_vs_reference, the ITL one itl_cv_ratio_vs_reference); v_history
-- calls the series `ttft_cv_pct`. The change points already computed under the old name keep their history.

update change_points set metric = 'ttft_cv_pct' where metric = 'jitter_pct';
