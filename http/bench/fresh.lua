-- POST /charges, each request under a new Idempotency-Key: "<tag>-<thread>-<n>".
-- wrk -s http/bench/fresh.lua URL -- TAG
local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("id", #threads)
end

function init(args)
  prefix = (args[1] or "run") .. "-" .. id .. "-"
  counter = 0
end

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"amount": 100, "currency": "eur"}'

function request()
  counter = counter + 1
  wrk.headers["Idempotency-Key"] = '"' .. prefix .. counter .. '"'
  return wrk.format()
end
