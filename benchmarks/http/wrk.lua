-- Run by wrk for every workload: `-- post N` makes each request a POST of N bytes;
-- at the end, one JSON line with the exact figures the report needs.
function init(args)
  if args[1] == "post" then
    wrk.method = "POST"
    wrk.body = string.rep("x", tonumber(args[2]))
    wrk.headers["Content-Type"] = "application/octet-stream"
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK-JSON {"requests": %d, "duration_us": %d, "bytes": %d, "socket_errors": %d, ' ..
    '"non_2xx": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d, "mean_us": %.1f}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean))
end
