-- wrk script: POST one JSON body per line of the file given after --, in turn.
local bodies = {}
local i = 0
function init(args)
  for line in io.lines(args[1]) do bodies[#bodies+1] = line end
end
function request()
  i = i % #bodies + 1
  return wrk.format("POST", wrk.path, {["Content-Type"]="application/json"}, bodies[i])
end
