// Package v1alpha1 is the nodeset.dev/v1alpha1 API: NodeClass, the admin's
// catalogue entry that says how machines are made, and NodeSet, the tenant's
// request for a number of nodes of a class.
//
// +k8s:deepcopy-gen=package
// +groupName=nodeset.dev
// +groupGoName=Nodeset
// +kubebuilder:object:generate=false
package v1alpha1
