-- One scenario of `python -m bench http` (bench/http.py), run by wrk.
--
-- The requests come from the file named by BENCH_REQUESTS, one a line:
--
--     METHOD <TAB> PATH <TAB> TOKEN <TAB> BODY
--
-- TOKEN (sent as `zt-session`) and BODY (sent as JSON) may be empty. Every request is formatted
-- once, at start, and the connections send them in turn, wrapping around at the end: one line is
-- one fixed request, two lines alternate (a role change and back), many lines rotate (a Dial
-- session per API session and service). With several wrk threads (BENCH_THREADS), thread i sends
-- lines i, i + threads, i + 2 threads, ... so that no two threads send the same line in a round.
--
-- Every answer's status is counted; done() prints one line, `BENCH-RESULT {json}`, with the
-- totals, the statuses, wrk's socket errors and the latency distribution (microseconds).

local threads = {}

function setup(thread)
   thread:set("thread_index", #threads)
   table.insert(threads, thread)
end

local prepared = {}
local position = 0
local stride = 1
statuses = {}

local function fields(line)
   local out = {}
   for field in (line .. "\t"):gmatch("([^\t]*)\t") do
      table.insert(out, field)
   end
   return out
end

function init(args)
   local name = os.getenv("BENCH_REQUESTS")
   local file = assert(io.open(name, "r"), "cannot open BENCH_REQUESTS " .. tostring(name))
   for line in file:lines() do
      if line ~= "" then
         local f = fields(line)
         local headers = { ["Accept"] = "application/json" }
         if f[3] and f[3] ~= "" then
            headers["zt-session"] = f[3]
         end
         local body = nil
         if f[4] and f[4] ~= "" then
            body = f[4]
            headers["Content-Type"] = "application/json"
         end
         table.insert(prepared, wrk.format(f[1], f[2], headers, body))
      end
   end
   file:close()
   assert(#prepared > 0, "no requests in " .. name)
   stride = tonumber(os.getenv("BENCH_THREADS") or "1")
   position = thread_index or 0
end

function request()
   local r = prepared[(position % #prepared) + 1]
   position = position + stride
   return r
end

function response(status, headers, body)
   statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
   local counts = {}
   for _, thread in ipairs(threads) do
      local theirs = thread:get("statuses") or {}
      for code, n in pairs(theirs) do
         counts[code] = (counts[code] or 0) + n
      end
   end
   local parts = {}
   for code, n in pairs(counts) do
      table.insert(parts, string.format('"%d": %d', code, n))
   end
   local e = summary.errors
   io.write(string.format(
      'BENCH-RESULT {"duration_us": %d, "requests": %d, "bytes": %d, '
         .. '"socket_errors": {"connect": %d, "read": %d, "write": %d, "timeout": %d}, '
         .. '"statuses": {%s}, "latency_us": {"min": %d, "mean": %.1f, "max": %d, '
         .. '"p50": %d, "p90": %d, "p99": %d}}\n',
      summary.duration, summary.requests, summary.bytes,
      e.connect, e.read, e.write, e.timeout,
      table.concat(parts, ", "),
      latency.min, latency.mean, latency.max,
      latency:percentile(50), latency:percentile(90), latency:percentile(99)
   ))
end
