-- v_quality_flips: every quality sample a non-reference variant and its run's reference both scored, side by
-- side, one row per (run, variant, suite, sample), and how the item fared across nights in the variant's
-- series (series_keys, scope = the suite: renaming the config or the variant keeps the history). Columns:
--   run_id, started_at (UTC), config_name
--   variant, reference_variant
--   suite, sample_id
--   prompt, target                what was asked and the expected answer
--   reference_score, score        per-sample scores in [0, 1] (quality_samples.score)
--   reference_response, response  the answers
--   change                        lost (the reference scored higher: for 0/1 scores, right -> wrong) |
--                                 gained (the variant scored higher) | same
--   series_key                    the variant's series for this suite (NULL for a run loaded without one)
--   nights                        nights this item was compared in the series, up to and including this run's
--                                 later nights too (the whole history)
--   nights_lost                   of those, nights it was lost
--   transitions                   times it went from lost to not lost or back, night to night
--   item_history                  lost every night | regression (kept, then lost from one night on) |
--                                 recovered (lost, then kept) | unstable (flipped back and forth: 2+ transitions) |
--                                 never lost | one night
-- Failed runs and samples without a score on either side (several measures per sample) are left out.

with pairs as (
    select
        v.run_id,
        timezone('UTC', r.started_at) as started_at,
        r.config_name,
        v.variant,
        ref.variant as reference_variant,
        v.suite,
        v.sample_id,
        coalesce(v.prompt, ref.prompt) as prompt,
        coalesce(v.target, ref.target) as target,
        ref.score as reference_score,
        v.score,
        ref.response as reference_response,
        v.response
    from quality_samples as v
    join runs as r on v.run_id = r.run_id
    join quality_samples as ref
        on ref.run_id = v.run_id and ref.variant = r.reference_variant and ref.suite = v.suite
        and ref.sample_id = v.sample_id
    where r.status <> 'failed' and v.variant <> r.reference_variant and v.score is not null and ref.score is not null
),

keyed as (
    select
        p.*,
        case when p.reference_score > p.score then 'lost' when p.reference_score < p.score then 'gained' else 'same' end
            as change,
        k.series_key,
        coalesce(k.series_key, p.run_id || '/' || p.variant) as item_series
    from pairs as p
    left join series_keys as k on p.run_id = k.run_id and p.variant = k.variant and p.suite = k.scope
),

stepped as (
    select
        *,
        case
            when lag(change) over w is null then 0
            when (lag(change) over w = 'lost') <> (change = 'lost') then 1
            else 0
        end as turned
    from keyed
    window w as (partition by item_series, suite, sample_id order by started_at, run_id)
),

counted as (
    select
        *,
        count(*) over s as nights,
        count(*) filter (where change = 'lost') over s as nights_lost,
        sum(turned) over s as transitions,
        last_value(change = 'lost') over (partition by item_series, suite, sample_id order by started_at, run_id
            rows between unbounded preceding and unbounded following) as lost_last
    from stepped
    window s as (partition by item_series, suite, sample_id)
),

final as (
    select
        run_id, started_at, config_name, variant, reference_variant, suite, sample_id, prompt, target,
        reference_score, score, reference_response, response, change, series_key, nights, nights_lost,
        transitions::integer as transitions,
        case
            when nights = 1 then 'one night'
            when nights_lost = 0 then 'never lost'
            when nights_lost = nights then 'lost every night'
            when transitions >= 2 then 'unstable'
            when lost_last then 'regression'
            else 'recovered'
        end as item_history
    from counted
)

select * from final
