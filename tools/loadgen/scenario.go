package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Scenario actions: each unit of a scenario run is one of them, picked by
// weight.
const (
	ActionCreate = "create" // POST /v1/task/create
	ActionQuery  = "query"  // GET /v1/task/query of a task the run created
	ActionList   = "list"   // GET /v1/task/list?limit=20
	ActionCancel = "cancel" // POST /v1/task/cancel of a task the run created
)

// ScenarioEntry is one action of a scenario and its weight.
type ScenarioEntry struct {
	Action string
	Weight int
}

// ParseScenario reads "ACTION=WEIGHT" items separated by commas or lines
// ("#" starts a comment), e.g. "create=2,query=10,list=1,cancel=1".
func ParseScenario(s string) ([]ScenarioEntry, error) {
	var out []ScenarioEntry
	seen := map[string]bool{}
	for _, line := range strings.Split(s, "\n") {
		line, _, _ = strings.Cut(line, "#")
		for _, item := range strings.Split(line, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			a, w, ok := strings.Cut(item, "=")
			a = strings.TrimSpace(a)
			n, err := strconv.Atoi(strings.TrimSpace(w))
			if !ok || err != nil || n < 1 {
				return nil, fmt.Errorf("scenario %q: want ACTION=WEIGHT with a positive whole weight", item)
			}
			switch a {
			case ActionCreate, ActionQuery, ActionList, ActionCancel:
			default:
				return nil, fmt.Errorf("scenario %q: the action is create, query, list or cancel", item)
			}
			if seen[a] {
				return nil, fmt.Errorf("scenario: %s given twice", a)
			}
			seen[a] = true
			out = append(out, ScenarioEntry{Action: a, Weight: n})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the scenario is empty")
	}
	return out, nil
}

// taskPool is the tasks a scenario run created, for its queries and
// cancels (at most poolSize, the newest kept).
type taskPool struct {
	mu    sync.Mutex
	tasks []owned
}

const poolSize = 10_000

func (p *taskPool) add(t owned) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.tasks) >= poolSize {
		i := rand.IntN(len(p.tasks))
		p.tasks[i] = t
		return
	}
	p.tasks = append(p.tasks, t)
}

// pick is a random task; take also removes it (a task is canceled once).
func (p *taskPool) pick(take bool) (owned, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.tasks) == 0 {
		return owned{}, false
	}
	i := rand.IntN(len(p.tasks))
	t := p.tasks[i]
	if take {
		p.tasks[i] = p.tasks[len(p.tasks)-1]
		p.tasks = p.tasks[:len(p.tasks)-1]
	}
	return t, true
}

// action picks a scenario action by weight.
func (r *runner) action() string {
	pick := rand.IntN(r.scenarioWeights)
	for _, e := range r.cfg.Scenario {
		if pick < e.Weight {
			return e.Action
		}
		pick -= e.Weight
	}
	return r.cfg.Scenario[0].Action
}

// scenarioUnit runs one action. A query or cancel before the run created
// any task (or once its tasks are all canceled) creates one instead.
func (r *runner) scenarioUnit(work context.Context, gw, key string, scheduled time.Time, l *labels) result {
	act := r.action()
	var t owned
	if act == ActionQuery || act == ActionCancel {
		var ok bool
		if t, ok = r.pool.pick(act == ActionCancel); !ok {
			act = ActionCreate
		}
	}
	l.action = act
	switch act {
	case ActionQuery:
		l.key, l.gateway, l.model = keyLabel(t.key), t.gateway, t.model
		_, res := r.query(work, t.gateway, t.key, t.id, 0, scheduled)
		return res
	case ActionList:
		return r.list(work, gw, key, scheduled)
	case ActionCancel:
		l.key, l.gateway, l.model = keyLabel(t.key), t.gateway, t.model
		return r.cancel(work, t, scheduled)
	default:
		body, model := r.body()
		l.model = model
		id, res := r.create(work, gw, key, body, scheduled, r.ops[OpCreate])
		if id != "" {
			r.pool.add(owned{id, key, model, gw})
		}
		return res
	}
}

func (r *runner) list(ctx context.Context, gw, key string, scheduled time.Time) result {
	code, b, errType, interrupted := r.do(ctx, http.MethodGet, gw+"/v1/task/list?limit=20", key, nil, r.cfg.Timeout)
	if interrupted {
		return result{outcome: unitUnfinished}
	}
	var page struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	ok := errType == "" && json.Unmarshal(b, &page) == nil && page.Tasks != nil
	if errType == "" && !ok {
		errType = "2xx without a task list"
	}
	r.ops[OpList].record(time.Since(scheduled), statusText(code), ok, errType)
	if !ok {
		return result{unitFailed, errorKind(statusText(code), "list: "+errType)}
	}
	return completed
}

// cancel cancels a task. A 409 (the task had already ended) is a right
// answer, so the unit completes.
func (r *runner) cancel(ctx context.Context, t owned, scheduled time.Time) result {
	body, _ := json.Marshal(map[string]string{"task_id": t.id})
	code, _, errType, interrupted := r.do(ctx, http.MethodPost, t.gateway+"/v1/task/cancel", t.key, body, r.cfg.Timeout)
	if interrupted {
		return result{outcome: unitUnfinished}
	}
	ok := errType == "" || code == http.StatusConflict
	r.ops[OpCancel].record(time.Since(scheduled), statusText(code), ok, errType)
	if !ok {
		return result{unitFailed, errorKind(statusText(code), "cancel: "+errType)}
	}
	return completed
}
