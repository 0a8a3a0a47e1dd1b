-- POST /charges, every request under one Idempotency-Key: the first executes, every other
-- one is a replay. wrk -s http/bench/replay.lua URL -- TAG
function init(args)
  wrk.headers["Idempotency-Key"] = '"' .. (args[1] or "run") .. '-replay"'
end

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"amount": 100, "currency": "eur"}'
