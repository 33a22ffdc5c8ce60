package redisproc

import (
	"strconv"
	"strings"
)

// CommandStat is one command's line of INFO commandstats.
type CommandStat struct {
	Calls int64 // calls, a script's own commands included
	Usec  int64 // microseconds spent in them
}

// ParseCommandstats reads INFO commandstats: each command's calls and time,
// by the name Redis gives it ("evalsha", "config|resetstat").
func ParseCommandstats(info string) map[string]CommandStat {
	out := map[string]CommandStat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st CommandStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.Calls = n
			case "usec":
				st.Usec = n
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return out
}
