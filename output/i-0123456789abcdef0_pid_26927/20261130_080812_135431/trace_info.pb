torch_neuronx stand-in placeholder: trace_info.pb
