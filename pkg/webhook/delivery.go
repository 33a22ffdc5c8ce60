package webhook

import "time"

// State is where the delivery of one event stands.
type State string

// Delivery states.
const (
	// StatePending: due, not yet attempted.
	StatePending State = "pending"
	// StateRetrying: attempted, not delivered, to be tried again.
	StateRetrying State = "retrying"
	// StateDelivered: the receiver answered 2xx.
	StateDelivered State = "delivered"
	// StateFailed: given up (an answer not worth retrying, or every retry
	// used).
	StateFailed State = "failed"
)

// States lists every state.
var States = []State{StatePending, StateRetrying, StateDelivered, StateFailed}

// Final reports whether no more attempts follow.
func (s State) Final() bool { return s == StateDelivered || s == StateFailed }

// Attempt is one delivery attempt, as the delivery log keeps it.
type Attempt struct {
	Time time.Time
	// StatusCode is the receiver's HTTP status, 0 if none (no answer).
	StatusCode int
	Latency    time.Duration
	// Error says why the attempt did not deliver, for the task's owner.
	Error string
}

// Delivery is the delivery of one event of a task.
type Delivery struct {
	// TaskID is the task's id where the list is not one task's (an
	// account's recent deliveries); "" otherwise.
	TaskID string
	Event  string
	// Seq tells apart the progress events (their percent); 0 otherwise.
	Seq     int
	State   State
	Created time.Time
	// Attempts, oldest first.
	Attempts []Attempt
}

// Outgoing is what a delivery sends, kept from its first attempt so that
// every retry sends the same message, even once the task's record is
// gone.
type Outgoing struct {
	URL  string
	Body []byte
}

// LogTTL is how long the record of a task's deliveries is kept after its
// last change: longer than a delivery is retried.
const LogTTL = 48 * time.Hour

// SecretOverlap is how long a rotated-out signing secret still signs
// deliveries beside the new one: time for the receivers to change theirs.
const SecretOverlap = 24 * time.Hour
