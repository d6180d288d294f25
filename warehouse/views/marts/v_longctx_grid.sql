-- v_longctx_grid: the long-context retrieval grid, one row per (run_id, variant, suite,
-- context_tokens, depth_pct) of a suite whose samples carry both (the longctx suite). Columns:
--   run_id, variant, suite
--   context_tokens                 prompt length asked for (tokens)
--   depth_pct                      needle depth (%: 0 = start of the filler, 100 = end)
--   n                              samples in the cell
--   accuracy                       fraction of samples that returned the pass key
--   prompt_tokens_mean             prompt length measured with the model's tokenizer (tokens)

with cells as (
    select
        run_id,
        variant,
        suite,
        cast(json_extract(details, '$.context_tokens') as integer) as context_tokens,
        cast(json_extract(details, '$.depth_pct') as double) as depth_pct,
        cast(json_extract(details, '$.prompt_tokens') as double) as prompt_tokens,
        score
    from quality_samples
    where json_extract(details, '$.depth_pct') is not null
        and json_extract(details, '$.context_tokens') is not null
),

final as (
    select
        run_id,
        variant,
        suite,
        context_tokens,
        depth_pct,
        count(*) as n,
        avg(score) as accuracy,
        avg(prompt_tokens) as prompt_tokens_mean
    from cells
    group by all
)

select * from final
