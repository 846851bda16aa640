-- wrk script: borrow, then return the lease borrowed, over keep-alive
-- connections. Leases are kept per wrk thread in a stack, so that every
-- lease a borrow gets is returned by a later request of that thread.
local pool = os.getenv("SEMAPHORE_POOL")
local json = { ["Content-Type"] = "application/json" }
local leases = {}

request = function()
  local lease = table.remove(leases)
  if lease then
    return wrk.format("POST", "/l/" .. pool .. "/return", json, '{"lease":"' .. lease .. '"}')
  end
  return wrk.format("POST", "/l/" .. pool .. "/borrow", json, '{"ttl":60,"wait":5}')
end

response = function(status, headers, body)
  local lease = body:match('"lease":"([%x%-]+)"')
  if lease then
    table.insert(leases, lease)
  end
end
