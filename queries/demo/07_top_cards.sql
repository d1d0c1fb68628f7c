-- The five biggest spenders among cards 100 to 149 (a key range on card_id).
SELECT card_id, count(*) AS orders, round(sum(amount), 2) AS spent
FROM consumption
WHERE card_id BETWEEN 100 AND 149
GROUP BY card_id
ORDER BY spent DESC, card_id
LIMIT 5;
