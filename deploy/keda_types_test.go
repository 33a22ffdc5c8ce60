package deploy

import (
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KEDA's ScaledObject and TriggerAuthentication (keda.sh/v1alpha1), written
// out from github.com/kedacore/keda/v2/apis/keda/v1alpha1 with the JSON
// names it uses: importing that package would bring KEDA's controller
// dependencies into the workspace. Decoded strictly, so a field KEDA does
// not have fails here as it would at the API server. TriggerAuthentication
// holds only the part Easel uses (secretTargetRef): anything else fails
// until it is added.

type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              scaledObjectSpec `json:"spec"`
}

type scaledObjectSpec struct {
	ScaleTargetRef        *scaleTarget      `json:"scaleTargetRef"`
	PollingInterval       *int32            `json:"pollingInterval,omitempty"`
	InitialCooldownPeriod *int32            `json:"initialCooldownPeriod,omitempty"`
	CooldownPeriod        *int32            `json:"cooldownPeriod,omitempty"`
	IdleReplicaCount      *int32            `json:"idleReplicaCount,omitempty"`
	MinReplicaCount       *int32            `json:"minReplicaCount,omitempty"`
	MaxReplicaCount       *int32            `json:"maxReplicaCount,omitempty"`
	Advanced              *advancedConfig   `json:"advanced,omitempty"`
	Triggers              []scaleTrigger    `json:"triggers"`
	Fallback              *scaledObjectFall `json:"fallback,omitempty"`
}

type scaleTarget struct {
	Name                   string `json:"name"`
	APIVersion             string `json:"apiVersion,omitempty"`
	Kind                   string `json:"kind,omitempty"`
	EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
}

type advancedConfig struct {
	HorizontalPodAutoscalerConfig *struct {
		Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
		Name     string                                         `json:"name,omitempty"`
	} `json:"horizontalPodAutoscalerConfig,omitempty"`
	RestoreToOriginalReplicaCount bool             `json:"restoreToOriginalReplicaCount,omitempty"`
	ScalingModifiers              scalingModifiers `json:"scalingModifiers,omitempty"`
}

type scalingModifiers struct {
	Formula          string                         `json:"formula,omitempty"`
	Target           string                         `json:"target,omitempty"`
	ActivationTarget string                         `json:"activationTarget,omitempty"`
	MetricType       autoscalingv2.MetricTargetType `json:"metricType,omitempty"`
}

type scaledObjectFall struct {
	FailureThreshold int32  `json:"failureThreshold"`
	Replicas         int32  `json:"replicas"`
	Behavior         string `json:"behavior,omitempty"`
}

type scaleTrigger struct {
	Type              string                         `json:"type"`
	Name              string                         `json:"name,omitempty"`
	UseCachedMetrics  bool                           `json:"useCachedMetrics,omitempty"`
	Metadata          map[string]string              `json:"metadata"`
	AuthenticationRef *authenticationRef             `json:"authenticationRef,omitempty"`
	MetricType        autoscalingv2.MetricTargetType `json:"metricType,omitempty"`
}

type authenticationRef struct {
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"`
}

type triggerAuthentication struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		SecretTargetRef []struct {
			Parameter string `json:"parameter"`
			Name      string `json:"name"`
			Key       string `json:"key"`
		} `json:"secretTargetRef,omitempty"`
	} `json:"spec"`
}

// redisScalerMetadata are the metadata keys of KEDA's redis (lists) scaler;
// the trigger's metadata is a free map to the API server, so a misspelt key
// would only show in KEDA's logs.
var redisScalerMetadata = map[string]bool{
	"address": true, "addressFromEnv": true, "host": true, "hostFromEnv": true,
	"port": true, "portFromEnv": true, "usernameFromEnv": true, "passwordFromEnv": true,
	"listName": true, "listLength": true, "activationListLength": true,
	"enableTLS": true, "unsafeSsl": true, "databaseIndex": true,
}

// redisScalerAuthParams are the parameters a TriggerAuthentication may give
// the redis scaler.
var redisScalerAuthParams = map[string]bool{
	"username": true, "password": true, "host": true, "port": true, "address": true,
	"tls": true, "ca": true, "cert": true, "key": true, "keyPassword": true,
}
