-- v_cost: what a variant's tokens and correct answers cost, where the config gives prices.
-- One row per (run_id, variant) with a price. Columns:
--   run_id, variant, engine, quantization
--   best_output_tok_s                       output tokens/s, best sustained (v_tradeoff)
--   usd_per_hour                   config: hardware cost (USD/hour)
--   usd_per_1m_input_tok           config: hosted price (USD per 1M input tokens)
--   usd_per_1m_output_tok          config: hosted price (USD per 1M output tokens)
--   cost_basis                     'token prices' (hosted) | 'hourly rate at best_output_tok_s' (own hardware)
--   usd_per_1m_tok                 USD per 1M output tokens: the hosted output price, or
--                                  usd_per_hour / (best_output_tok_s x 3600) x 1e6 on own hardware
--   quality, quality_metric        primary quality metric (v_tradeoff)
--   tokens_per_answer              mean prompt + output tokens per sample of the primary suite, from
--                                  quality_samples.details (prompt_tokens, output_tokens); NULL when
--                                  the suite does not record them
--   usd_per_correct_answer         cost of one answer / quality, for fraction-valued quality > 0
--   cost_note                      why usd_per_correct_answer is NULL

with priced as (
    select
        t.run_id,
        t.variant,
        t.engine,
        t.quantization,
        t.best_output_tok_s,
        v.usd_per_hour,
        v.usd_per_1m_input_tok,
        v.usd_per_1m_output_tok,
        t.quality,
        t.quality_metric
    from v_tradeoff as t
    join variants as v on t.run_id = v.run_id and t.variant = v.variant
    where v.usd_per_hour is not null or v.usd_per_1m_output_tok is not null
),

answer_tokens as (
    select
        s.run_id,
        s.variant,
        avg(try_cast(json_extract(s.details, '$.prompt_tokens') as double)) as prompt_tokens,
        avg(try_cast(json_extract(s.details, '$.output_tokens') as double)) as output_tokens
    from quality_samples as s
    join runs as r on s.run_id = r.run_id and s.suite = split_part(r.primary_quality_metric, '.', 1)
    group by s.run_id, s.variant
),

unit as (
    select distinct run_id, suite || '.' || metric as quality_metric, unit
    from quality_scores
),

costed as (
    select
        p.*,
        case when p.usd_per_1m_output_tok is not null then 'token prices' else 'hourly rate at best_output_tok_s' end
            as cost_basis,
        coalesce(p.usd_per_1m_output_tok, p.usd_per_hour / nullif(p.best_output_tok_s * 3600, 0) * 1e6) as usd_per_1m_tok,
        a.prompt_tokens + a.output_tokens as tokens_per_answer,
        case
            when p.usd_per_1m_output_tok is not null
                then (coalesce(p.usd_per_1m_input_tok, 0) * a.prompt_tokens + p.usd_per_1m_output_tok * a.output_tokens) / 1e6
            -- own hardware: the time to generate the answer's output tokens at best_output_tok_s
            else p.usd_per_hour / 3600 * a.output_tokens / nullif(p.best_output_tok_s, 0)
        end as usd_per_answer,
        u.unit as quality_unit
    from priced as p
    left join answer_tokens as a on p.run_id = a.run_id and p.variant = a.variant
    left join unit as u on p.run_id = u.run_id and p.quality_metric = u.quality_metric
),

final as (
    select
        run_id, variant, engine, quantization, best_output_tok_s, usd_per_hour, usd_per_1m_input_tok,
        usd_per_1m_output_tok, cost_basis, usd_per_1m_tok, quality, quality_metric, tokens_per_answer,
        case when quality_unit = 'fraction' and quality > 0 then usd_per_answer / quality end
            as usd_per_correct_answer,
        case
            when quality_metric is null then 'no primary quality metric'
            when usd_per_answer is null then 'the primary suite records no token counts per sample'
            when quality_unit <> 'fraction' then 'primary quality metric is not an accuracy'
            when quality = 0 then 'no correct answer'
        end as cost_note
    from costed
)

select * from final
