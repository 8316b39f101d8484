// A real OpenVINO extension for the --cpu_extension tests: the custom operation AddOne (y = x + 1,
// f32), which the CPU plugin runs through evaluate(). Built by tests/core/runtime/test_cpu_extension.py
// against the headers and library of the installed openvino wheel.
#include <openvino/core/extension.hpp>
#include <openvino/core/op_extension.hpp>
#include <openvino/op/op.hpp>

class AddOne : public ov::op::Op {
public:
    OPENVINO_OP("AddOne");
    AddOne() = default;
    explicit AddOne(const ov::Output<ov::Node>& arg) : Op({arg}) {
        constructor_validate_and_infer_types();
    }
    void validate_and_infer_types() override {
        set_output_type(0, get_input_element_type(0), get_input_partial_shape(0));
    }
    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override {
        return std::make_shared<AddOne>(args.at(0));
    }
    bool visit_attributes(ov::AttributeVisitor&) override { return true; }
    bool has_evaluate() const override { return true; }
    bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override {
        outputs[0].set_shape(inputs[0].get_shape());
        const float* x = inputs[0].data<const float>();
        float* y = outputs[0].data<float>();
        for (size_t i = 0; i < inputs[0].get_size(); ++i) y[i] = x[i] + 1.0f;
        return true;
    }
};

OPENVINO_CREATE_EXTENSIONS(
    std::vector<ov::Extension::Ptr>({std::make_shared<ov::OpExtension<AddOne>>()}));
