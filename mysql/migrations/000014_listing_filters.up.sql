-- Every filter of a listing is served by an index that holds the filter,
-- the merchant and the listing's order (created_at, id): a page reads its
-- own rows and no others, however many of the merchant's rows have another
-- status. payments_status (status, created_at) is extended rather than a
-- ninth index added beside it: it still finds a status across merchants
-- (the review queue, ops); only ops' listing of a status across merchants
-- in creation order now sorts what that status holds. No statement of an
-- earlier release names it, so those replicas serve on either schema.
-- Refunds had no index on their status with the merchant; refunds of one
-- payment keep refunds_payment, which holds only that payment's few. The
-- events listing's filters already had theirs (events_merchant_type, and
-- events_object_seq: an object's handful of events, sorted).
ALTER TABLE payments
    DROP KEY payments_status,
    ADD KEY payments_status (status, merchant_id, created_at, id);
ALTER TABLE refunds
    ADD KEY refunds_status (status, merchant_id, created_at, id);
