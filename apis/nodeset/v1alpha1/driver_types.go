package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Every field of a driver section is optional in the schema, because a NodeSet
// uses the same sections to override the fields its class allows. The NodeClass
// schema requires the fields a driver cannot work without.

// SimulatedMachine declares what a simulated machine reports.
type SimulatedMachine struct {
	// instanceType is reported as the node.kubernetes.io/instance-type label.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`
	InstanceType string `json:"instanceType,omitempty"`
	// capacity is what the simulated kubelet reports as capacity and
	// allocatable: cpu, memory, pods, ephemeral-storage and any extended
	// resource, each at most 1Pi. Defaults to 2 cpu, 8Gi memory, 110 pods,
	// 100Gi ephemeral-storage.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, type(self[k]) == int ? (self[k] >= 0 && self[k] <= 1125899906842624) : (self[k].matches('^[+]?([0-9]+([.][0-9]*)?|[.][0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]{1,2})?$') && quantity(self[k]).compareTo(quantity('1Pi')) <= 0))",message="simulated.capacity: each quantity must be non-negative and at most 1Pi, with a decimal exponent of at most two digits, such as 4, 500m, 8Gi or 1e3"
	Capacity corev1.ResourceList `json:"capacity,omitempty"`
	// labels are reported by the simulated kubelet, as a real one reports its
	// --node-labels and well-known labels.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() <= 317 && self[k].size() <= 63)",message="simulated.labels: keys must be at most 317 characters and values at most 63"
	Labels map[string]string `json:"labels,omitempty"`
	// bootDelay is how long a simulated machine takes from launch to Ready, at most 1h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]{1,5}(\\\\.[0-9]{1,9})?(ns|us|ms|s|m|h)){1,4}$') && duration(self) <= duration('1h')",message="simulated.bootDelay must be a duration of at most 1h, such as 5s"
	BootDelay *metav1.Duration `json:"bootDelay,omitempty"`
	// failurePercent is the share of machines, from 0 to 100, that never
	// register, so replacement paths can be exercised.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	FailurePercent *int32 `json:"failurePercent,omitempty"`
	// maxMachines is how many machines of this class the simulated cloud
	// has room for: a create past it fails as out of capacity, as a cloud's
	// does when it has none, so the paths of a cloud that ran out can be
	// exercised. Absent means no limit. The class's value always holds: it
	// cannot be listed in tenantOverrides.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	MaxMachines *int32 `json:"maxMachines,omitempty"`
}

// DockerMachine configures machines made by a docker-machine driver plugin.
type DockerMachine struct {
	// driverName is the plugin's name: the node controller runs
	// docker-machine-driver-<driverName> from its PATH.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	DriverName string `json:"driverName,omitempty"`
	// options are the plugin's create flags, by flag name (for example
	// amazonec2-instance-type), as text. They are checked against the flags and
	// types the plugin declares.
	// +optional
	// +kubebuilder:validation:MaxProperties=128
	Options map[string]string `json:"options,omitempty"`
	// credentialOptions maps plugin flags to keys of the class's credentials
	// Secret; their values are read by the node controller only.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	CredentialOptions map[string]string `json:"credentialOptions,omitempty"`
	// credentialFileOptions maps plugin flags that take a file path (an SSH
	// private key, a service-account JSON file, a client certificate) to keys
	// of the class's credentials Secret: the node controller writes the key's
	// value to a private file (mode 0600) in the machine's store directory,
	// passes the file's path to the plugin, and removes the file with the
	// machine.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	CredentialFileOptions map[string]string `json:"credentialFileOptions,omitempty"`
	// provisioning says how a new machine joins the cluster.
	// +optional
	Provisioning *MachineProvisioning `json:"provisioning,omitempty"`
}

// ProvisioningMethod says how a machine's kubelet is installed and started.
// +kubebuilder:validation:Enum=UserData;SSH
type ProvisioningMethod string

const (
	// ProvisioningUserData passes a cloud-init script through a driver option.
	ProvisioningUserData ProvisioningMethod = "UserData"
	// ProvisioningSSH runs the script over SSH with the driver's host, port, user and key.
	ProvisioningSSH ProvisioningMethod = "SSH"
)

// MachineProvisioning says how a machine joins the cluster. The kubelet runs
// with --hostname-override set to the Node's name and a short-lived bootstrap
// token made for that machine.
//
// +kubebuilder:validation:XValidation:rule="self.method != 'UserData' || has(self.userDataOption)",message="provisioning.userDataOption is required when method is UserData"
type MachineProvisioning struct {
	// method is UserData (a cloud-init script through the driver option named in
	// userDataOption) or SSH (the script run over the driver's SSH connection).
	// +required
	Method ProvisioningMethod `json:"method"`
	// userDataOption is the plugin flag that takes a user-data file, such as
	// amazonec2-userdata.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	UserDataOption string `json:"userDataOption,omitempty"`
	// apiServerURL is the address kubelets join; defaults to the node
	// controller's own API server address.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://')",message="provisioning.apiServerURL must be an https:// URL"
	APIServerURL string `json:"apiServerURL,omitempty"`
	// kubernetesVersion is the kubelet version to install, such as v1.37.2.
	// +optional
	// +kubebuilder:validation:Pattern=`^v[0-9]+\.[0-9]+\.[0-9]+$`
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// script replaces the built-in join script. It is a shell script; the
	// variables NODE_NAME, API_SERVER_URL, BOOTSTRAP_TOKEN, CA_CERT_BASE64 and
	// KUBERNETES_VERSION are set when it runs.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	Script string `json:"script,omitempty"`
}

// EKSAutoscalingGroup configures one EC2 Auto Scaling group of self-managed EKS
// workers per NodeSet.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.instanceType) && has(self.mixedInstances))",message="eksAutoscalingGroup: set instanceType or mixedInstances, not both"
type EKSAutoscalingGroup struct {
	// clusterName is the EKS cluster the nodes join.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=100
	// +kubebuilder:validation:Pattern=`^[0-9A-Za-z][A-Za-z0-9\-_]*$`
	ClusterName string `json:"clusterName,omitempty"`
	// region is the AWS region, such as eu-west-1.
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-z]{2}(-[a-z]+)+-[0-9]+$`
	Region string `json:"region,omitempty"`
	// imageID is the AMI the instances boot.
	// +optional
	// +kubebuilder:validation:Pattern=`^ami-[0-9a-f]{8,17}$`
	ImageID string `json:"imageID,omitempty"`
	// instanceType is the EC2 instance type, such as m5.large, when the group
	// uses one type.
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-z0-9-]+\.[a-z0-9]+$`
	InstanceType string `json:"instanceType,omitempty"`
	// mixedInstances diversifies instance types and purchases spot capacity.
	// +optional
	MixedInstances *MixedInstancesPolicy `json:"mixedInstances,omitempty"`
	// subnetIDs are the subnets the group launches into.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Pattern=`^subnet-[0-9a-f]{8,17}$`
	SubnetIDs []string `json:"subnetIDs,omitempty"`
	// securityGroupIDs are attached to every instance.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Pattern=`^sg-[0-9a-f]{8,17}$`
	SecurityGroupIDs []string `json:"securityGroupIDs,omitempty"`
	// instanceProfile is the IAM instance profile, by name or ARN.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	InstanceProfile string `json:"instanceProfile,omitempty"`
	// keyName is the EC2 key pair for SSH access.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	KeyName string `json:"keyName,omitempty"`
	// blockDevices are the instances' EBS volumes.
	// +optional
	// +listType=map
	// +listMapKey=deviceName
	// +kubebuilder:validation:MaxItems=16
	BlockDevices []BlockDevice `json:"blockDevices,omitempty"`
	// metadataOptions configures the instance metadata service (IMDSv2).
	// +optional
	MetadataOptions *InstanceMetadataOptions `json:"metadataOptions,omitempty"`
	// capacityRebalance lets the group launch a replacement when a spot
	// instance is at risk of interruption.
	// +optional
	CapacityRebalance *bool `json:"capacityRebalance,omitempty"`
	// tags are added to the group, its launch template and its instances, next
	// to the owner tags nodeset always sets.
	// +optional
	// +kubebuilder:validation:MaxProperties=40
	Tags map[string]string `json:"tags,omitempty"`
	// bootstrap is how an instance joins the EKS cluster.
	// +optional
	Bootstrap *EKSBootstrap `json:"bootstrap,omitempty"`
	// interruptions makes the node controller drain a Node before AWS takes
	// its instance: spot interruption warnings, rebalance recommendations,
	// scheduled maintenance, state changes and Auto Scaling terminations,
	// read from an SQS queue that EventBridge rules fill. Changing it rolls
	// no Node.
	// +optional
	Interruptions *EKSInterruptions `json:"interruptions,omitempty"`
}

// RebalancePolicy is what a rebalance recommendation does to its Node.
// +kubebuilder:validation:Enum=Taint;ReplaceFirst
type RebalancePolicy string

const (
	// RebalanceTaint taints the Node PreferNoSchedule, so nothing new lands
	// there unless it must; the Node stays until AWS interrupts it.
	RebalanceTaint RebalancePolicy = "Taint"
	// RebalanceReplaceFirst launches a replacement first, then drains the
	// Node and terminates its instance, like one step of a rolling update.
	RebalanceReplaceFirst RebalancePolicy = "ReplaceFirst"
)

// EKSInterruptions configures the handling of AWS's termination notices.
type EKSInterruptions struct {
	// queueURL is the SQS queue EventBridge delivers the events to, such as
	// https://sqs.eu-west-1.amazonaws.com/111122223333/nodeset-interruptions.
	// Classes may share a queue.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^https?://`
	QueueURL string `json:"queueURL"`
	// heartbeatTimeout is the heartbeat timeout of the termination lifecycle
	// hook nodeset puts on each group: how long Auto Scaling waits for the
	// next heartbeat before it terminates the instance anyway. 30s to 2h;
	// defaults to 5m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]{1,5}(\\\\.[0-9]{1,9})?(ns|us|ms|s|m|h)){1,4}$') && duration(self) >= duration('30s') && duration(self) <= duration('2h')",message="spec.eksAutoscalingGroup.interruptions.heartbeatTimeout must be a duration from 30s to 2h, such as 5m"
	HeartbeatTimeout *metav1.Duration `json:"heartbeatTimeout,omitempty"`
	// maxDrainTime is the longest a drain holds an instance that Auto
	// Scaling terminates (with heartbeats every half heartbeatTimeout);
	// then the lifecycle action is completed and the instance goes. At most
	// 48h and 100 heartbeat timeouts (Auto Scaling's own limits); defaults
	// to the class's drain timeout.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]{1,5}(\\\\.[0-9]{1,9})?(ns|us|ms|s|m|h)){1,4}$') && duration(self) <= duration('48h')",message="spec.eksAutoscalingGroup.interruptions.maxDrainTime must be a non-negative duration of at most 48h, such as 15m"
	MaxDrainTime *metav1.Duration `json:"maxDrainTime,omitempty"`
	// rebalance is what a rebalance recommendation does: Taint (the
	// default) taints the Node PreferNoSchedule; ReplaceFirst launches a
	// replacement, then drains the Node and terminates its instance.
	// +optional
	// +kubebuilder:default=Taint
	Rebalance RebalancePolicy `json:"rebalance,omitempty"`
}

// MixedInstancesPolicy diversifies instance types and buys spot capacity.
type MixedInstancesPolicy struct {
	// instanceTypes the group may launch, in priority order.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=40
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9-]+\.[a-z0-9]+$`
	InstanceTypes []string `json:"instanceTypes"`
	// onDemandBaseCapacity is how many instances are on-demand before any spot.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	OnDemandBaseCapacity *int32 `json:"onDemandBaseCapacity,omitempty"`
	// onDemandPercentageAboveBaseCapacity is the on-demand share, 0 to 100,
	// above the base; the rest is spot.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	OnDemandPercentageAboveBaseCapacity *int32 `json:"onDemandPercentageAboveBaseCapacity,omitempty"`
	// spotAllocationStrategy picks spot pools.
	// +optional
	// +kubebuilder:validation:Enum=lowest-price;capacity-optimized;capacity-optimized-prioritized;price-capacity-optimized
	SpotAllocationStrategy string `json:"spotAllocationStrategy,omitempty"`
	// spotMaxPrice is the most to pay per hour for a spot instance, in USD;
	// empty means the on-demand price.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	SpotMaxPrice string `json:"spotMaxPrice,omitempty"`
}

// BlockDevice is one EBS volume of an instance.
type BlockDevice struct {
	// deviceName is the device, such as /dev/xvda.
	// +required
	// +kubebuilder:validation:Pattern=`^/dev/[a-z0-9]+$`
	DeviceName string `json:"deviceName"`
	// volumeSize in GiB.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	VolumeSize *int32 `json:"volumeSize,omitempty"`
	// volumeType is the EBS volume type.
	// +optional
	// +kubebuilder:validation:Enum=gp2;gp3;io1;io2;st1;sc1;standard
	VolumeType string `json:"volumeType,omitempty"`
	// iops for gp3, io1 and io2 volumes, at most 256000 (io2 Block Express).
	// +optional
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=256000
	IOPS *int32 `json:"iops,omitempty"`
	// throughput in MiB/s for gp3 volumes, at most 2000.
	// +optional
	// +kubebuilder:validation:Minimum=125
	// +kubebuilder:validation:Maximum=2000
	Throughput *int32 `json:"throughput,omitempty"`
	// encrypted encrypts the volume.
	// +optional
	Encrypted *bool `json:"encrypted,omitempty"`
	// kmsKeyID is the KMS key for an encrypted volume.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	KMSKeyID string `json:"kmsKeyID,omitempty"`
	// deleteOnTermination deletes the volume with the instance; defaults to true.
	// +optional
	DeleteOnTermination *bool `json:"deleteOnTermination,omitempty"`
}

// InstanceMetadataOptions configures the EC2 instance metadata service.
type InstanceMetadataOptions struct {
	// httpTokens is required (IMDSv2 only, the default) or optional.
	// +optional
	// +kubebuilder:default=required
	// +kubebuilder:validation:Enum=required;optional
	HTTPTokens string `json:"httpTokens,omitempty"`
	// httpPutResponseHopLimit; 2 lets pods reach the service through the node.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	HTTPPutResponseHopLimit *int32 `json:"httpPutResponseHopLimit,omitempty"`
	// httpEndpoint turns the service on (enabled) or off (disabled).
	// +optional
	// +kubebuilder:validation:Enum=enabled;disabled
	HTTPEndpoint string `json:"httpEndpoint,omitempty"`
}

// BootstrapFormat is the user-data format that joins an instance to EKS.
// +kubebuilder:validation:Enum=NodeConfig;BootstrapScript
type BootstrapFormat string

const (
	// BootstrapNodeConfig is nodeadm's NodeConfig (Amazon Linux 2023 AMIs).
	BootstrapNodeConfig BootstrapFormat = "NodeConfig"
	// BootstrapScript is /etc/eks/bootstrap.sh (Amazon Linux 2 AMIs).
	BootstrapScript BootstrapFormat = "BootstrapScript"
)

// EKSBootstrap is how an instance joins its EKS cluster. Labels and taints are
// applied by the controller on the Node, not only through kubelet flags.
type EKSBootstrap struct {
	// format is NodeConfig (nodeadm, the default) or BootstrapScript (bootstrap.sh).
	// +optional
	// +kubebuilder:default=NodeConfig
	Format BootstrapFormat `json:"format,omitempty"`
	// apiServerEndpoint of the cluster; looked up from EKS when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	APIServerEndpoint string `json:"apiServerEndpoint,omitempty"`
	// certificateAuthority is the cluster's base64 CA bundle; looked up from EKS when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	CertificateAuthority string `json:"certificateAuthority,omitempty"`
	// serviceCIDR of the cluster, for the kubelet's cluster DNS address.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ServiceCIDR string `json:"serviceCIDR,omitempty"`
	// kubeletExtraArgs are appended to the kubelet's flags. An item longer
	// than EC2's 16384 bytes of user data could never reach an instance.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=16384
	KubeletExtraArgs []string `json:"kubeletExtraArgs,omitempty"`
	// preBootstrapCommands run before the node joins. An item longer than
	// EC2's 16384 bytes of user data could never reach an instance.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=16384
	PreBootstrapCommands []string `json:"preBootstrapCommands,omitempty"`
}

// EKSManagedNodeGroup configures one EKS managed node group per NodeSet.
type EKSManagedNodeGroup struct {
	// clusterName is the EKS cluster.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=100
	// +kubebuilder:validation:Pattern=`^[0-9A-Za-z][A-Za-z0-9\-_]*$`
	ClusterName string `json:"clusterName,omitempty"`
	// region is the AWS region, such as eu-west-1.
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-z]{2}(-[a-z]+)+-[0-9]+$`
	Region string `json:"region,omitempty"`
	// nodeRole is the IAM role ARN of the nodes.
	// +optional
	// +kubebuilder:validation:Pattern=`^arn:aws[a-z-]*:iam::[0-9]{12}:role/.+$`
	NodeRole string `json:"nodeRole,omitempty"`
	// subnets the node group launches into.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Pattern=`^subnet-[0-9a-f]{8,17}$`
	Subnets []string `json:"subnets,omitempty"`
	// instanceTypes of the node group.
	// +optional
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9-]+\.[a-z0-9]+$`
	InstanceTypes []string `json:"instanceTypes,omitempty"`
	// amiType, such as AL2023_x86_64_STANDARD or BOTTLEROCKET_ARM_64.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_]+$`
	AMIType string `json:"amiType,omitempty"`
	// capacityType is ON_DEMAND, SPOT or CAPACITY_BLOCK.
	// +optional
	// +kubebuilder:validation:Enum=ON_DEMAND;SPOT;CAPACITY_BLOCK
	CapacityType string `json:"capacityType,omitempty"`
	// diskSize of the root volume in GiB (without a launch template), at most
	// 16384: the largest gp2 or gp3 EBS volume, the types EKS gives it.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16384
	DiskSize *int32 `json:"diskSize,omitempty"`
	// version is the Kubernetes minor version, such as "1.37".
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9]+\.[0-9]+$`
	Version string `json:"version,omitempty"`
	// releaseVersion is the AMI release version, such as 1.37.2-20261101.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ReleaseVersion string `json:"releaseVersion,omitempty"`
	// launchTemplate the node group uses.
	// +optional
	LaunchTemplate *LaunchTemplateReference `json:"launchTemplate,omitempty"`
	// updateConfig bounds how many nodes EKS replaces at once in a managed update.
	// +optional
	UpdateConfig *ManagedUpdateConfig `json:"updateConfig,omitempty"`
	// remoteAccess allows SSH to the nodes.
	// +optional
	RemoteAccess *RemoteAccess `json:"remoteAccess,omitempty"`
	// tags are added to the node group, next to the owner tags nodeset sets:
	// at most 40 (EKS allows 50 on a node group, nodeset's own take up to
	// ten), keys of 1 to 128 characters, not under aws: (AWS's) or
	// nodeset.dev/ (nodeset's), values of at most 256.
	// +optional
	// +kubebuilder:validation:MaxProperties=40
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() >= 1 && k.size() <= 128 && self[k].size() <= 256)",message="eksManagedNodeGroup.tags: EKS allows keys of 1 to 128 characters and values of at most 256"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.lowerAscii().startsWith('aws:') && !k.lowerAscii().startsWith('nodeset.dev/'))",message="eksManagedNodeGroup.tags: keys under aws: are reserved for AWS, keys under nodeset.dev/ for nodeset"
	Tags map[string]string `json:"tags,omitempty"`
	// labels are the node group's Kubernetes labels. EKS allows keys of 1
	// to 63 characters, prefix included, values of 1 to 63, and no key
	// containing kubernetes.io/, k8s.io/ or eks.amazonaws.com/ (set such a
	// label in the NodeClass's nodeTemplate: nodeset puts it on the Nodes).
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() >= 1 && k.size() <= 63 && self[k].size() >= 1 && self[k].size() <= 63)",message="eksManagedNodeGroup.labels: EKS allows keys of 1 to 63 characters, prefix included, and values of 1 to 63"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.contains('kubernetes.io/') && !k.contains('k8s.io/') && !k.contains('eks.amazonaws.com/'))",message="eksManagedNodeGroup.labels: EKS refuses keys containing kubernetes.io/, k8s.io/ or eks.amazonaws.com/"
	Labels map[string]string `json:"labels,omitempty"`
	// taints are the node group's Kubernetes taints, at most one per key and
	// effect. Server-side apply merges them by key and effect, so each
	// applier owns its own.
	// +optional
	// +listType=map
	// +listMapKey=key
	// +listMapKey=effect
	// +kubebuilder:validation:MaxItems=50
	Taints []ManagedTaint `json:"taints,omitempty"`
}

// LaunchTemplateReference names an EC2 launch template by id or name.
//
// +kubebuilder:validation:XValidation:rule="has(self.id) != has(self.name)",message="launchTemplate: set exactly one of id and name"
type LaunchTemplateReference struct {
	// id of the launch template.
	// +optional
	// +kubebuilder:validation:Pattern=`^lt-[0-9a-f]{8,17}$`
	ID string `json:"id,omitempty"`
	// name of the launch template: 3 to 128 letters, digits and ( ) . - / _,
	// as EC2 allows.
	// +optional
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9().\-/_]+$`
	Name string `json:"name,omitempty"`
	// version of the launch template; the default version when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Version string `json:"version,omitempty"`
}

// ManagedUpdateConfig bounds a managed node group update.
//
// +kubebuilder:validation:XValidation:rule="has(self.maxUnavailable) != has(self.maxUnavailablePercentage)",message="updateConfig: set exactly one of maxUnavailable and maxUnavailablePercentage"
type ManagedUpdateConfig struct {
	// maxUnavailable nodes during an update.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxUnavailable *int32 `json:"maxUnavailable,omitempty"`
	// maxUnavailablePercentage of nodes during an update.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxUnavailablePercentage *int32 `json:"maxUnavailablePercentage,omitempty"`
}

// RemoteAccess allows SSH to a managed node group's nodes.
type RemoteAccess struct {
	// ec2SSHKey is the EC2 key pair name.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	EC2SSHKey string `json:"ec2SSHKey,omitempty"`
	// sourceSecurityGroups may reach the nodes over SSH.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Pattern=`^sg-[0-9a-f]{8,17}$`
	SourceSecurityGroups []string `json:"sourceSecurityGroups,omitempty"`
}

// ManagedTaint is a taint in the EKS API's spelling.
type ManagedTaint struct {
	// key of the taint, with the syntax of a Kubernetes taint key, of at most
	// 63 characters, prefix included, as EKS allows.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`
	Key string `json:"key"`
	// value of the taint.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`
	Value string `json:"value,omitempty"`
	// effect is NO_SCHEDULE, NO_EXECUTE or PREFER_NO_SCHEDULE.
	// +required
	// +kubebuilder:validation:Enum=NO_SCHEDULE;NO_EXECUTE;PREFER_NO_SCHEDULE
	Effect string `json:"effect"`
}
