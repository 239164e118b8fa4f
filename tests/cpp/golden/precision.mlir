// aten::mm, precision HIGH
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<2x3xf32>, %1: tensor<3x4xf32>) -> (tensor<2x4xf32>) {
    %2 = "stablehlo.dot_general"(%0, %1) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision HIGH>, #stablehlo<precision HIGH>]} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
    "func.return"(%2) : (tensor<2x4xf32>) -> ()
  }
}
// aten::mm, precision DEFAULT
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<2x3xf32>, %1: tensor<3x4xf32>) -> (tensor<2x4xf32>) {
    %2 = "stablehlo.dot_general"(%0, %1) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
    "func.return"(%2) : (tensor<2x4xf32>) -> ()
  }
}
// aten::mm, precision DEFAULT
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<2x3xf64>, %1: tensor<3x4xf64>) -> (tensor<2x4xf64>) {
    %2 = "stablehlo.dot_general"(%0, %1) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]} : (tensor<2x3xf64>, tensor<3x4xf64>) -> tensor<2x4xf64>
    "func.return"(%2) : (tensor<2x4xf64>) -> ()
  }
}
// aten::bmm, precision DEFAULT
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<2x2x3xbf16>, %1: tensor<2x3x4xbf16>) -> (tensor<2x2x4xbf16>) {
    %2 = "stablehlo.dot_general"(%0, %1) {dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>} : (tensor<2x2x3xbf16>, tensor<2x3x4xbf16>) -> tensor<2x2x4xf32>
    %3 = "stablehlo.convert"(%2) : (tensor<2x2x4xf32>) -> tensor<2x2x4xbf16>
    "func.return"(%3) : (tensor<2x2x4xbf16>) -> ()
  }
}
// torch_tpu::_sdpa_forward, precision HIGH
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<1x1x2x2xf32>, %1: tensor<1x1x2x2xf32>, %2: tensor<1x1x2x2xf32>) -> (tensor<1x1x2x2xf32>, tensor<1x1x2xf32>, tensor<i64>, tensor<i64>) {
    %3 = "stablehlo.dot_general"(%0, %1) {dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [0, 1], rhs_batching_dimensions = [0, 1], lhs_contracting_dimensions = [3], rhs_contracting_dimensions = [3]>, precision_config = [#stablehlo<precision HIGH>, #stablehlo<precision HIGH>]} : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
    %4 = "stablehlo.constant"() {value = dense<7.07106781186547462e-01> : tensor<f32>} : () -> tensor<f32>
    %5 = "stablehlo.broadcast_in_dim"(%4) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<1x1x2x2xf32>
    %6 = "stablehlo.multiply"(%3, %5) : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
    %7 = "stablehlo.constant"() {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>
    %8 = "stablehlo.broadcast_in_dim"(%7) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<1x1x2x2xf32>
    %9 = "stablehlo.constant"() {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>
    %13 = "stablehlo.reduce"(%6, %9) ({
    ^bb0(%10: tensor<f32>, %11: tensor<f32>):
      %12 = "stablehlo.maximum"(%10, %11) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%12) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 3>} : (tensor<1x1x2x2xf32>, tensor<f32>) -> tensor<1x1x2xf32>
    %14 = "stablehlo.constant"() {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>
    %15 = "stablehlo.broadcast_in_dim"(%14) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<1x1x2xf32>
    %16 = "stablehlo.compare"(%13, %15) {comparison_direction = #stablehlo<comparison_direction EQ>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<1x1x2xf32>, tensor<1x1x2xf32>) -> tensor<1x1x2xi1>
    %17 = "stablehlo.constant"() {value = dense<0.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %18 = "stablehlo.broadcast_in_dim"(%17) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<1x1x2xf32>
    %19 = "stablehlo.select"(%16, %18, %13) : (tensor<1x1x2xi1>, tensor<1x1x2xf32>, tensor<1x1x2xf32>) -> tensor<1x1x2xf32>
    %20 = "stablehlo.broadcast_in_dim"(%19) {broadcast_dimensions = array<i64: 0, 1, 2>} : (tensor<1x1x2xf32>) -> tensor<1x1x2x2xf32>
    %21 = "stablehlo.subtract"(%6, %20) : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
    %22 = "stablehlo.exponential"(%21) : (tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
    %23 = "stablehlo.constant"() {value = dense<0.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %27 = "stablehlo.reduce"(%22, %23) ({
    ^bb0(%24: tensor<f32>, %25: tensor<f32>):
      %26 = "stablehlo.add"(%24, %25) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%26) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 3>} : (tensor<1x1x2x2xf32>, tensor<f32>) -> tensor<1x1x2xf32>
    %28 = "stablehlo.constant"() {value = dense<1.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %29 = "stablehlo.broadcast_in_dim"(%28) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<1x1x2xf32>
    %30 = "stablehlo.select"(%16, %29, %27) : (tensor<1x1x2xi1>, tensor<1x1x2xf32>, tensor<1x1x2xf32>) -> tensor<1x1x2xf32>
    %31 = "stablehlo.broadcast_in_dim"(%30) {broadcast_dimensions = array<i64: 0, 1, 2>} : (tensor<1x1x2xf32>) -> tensor<1x1x2x2xf32>
    %32 = "stablehlo.divide"(%22, %31) : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
    %33 = "stablehlo.log"(%27) : (tensor<1x1x2xf32>) -> tensor<1x1x2xf32>
    %34 = "stablehlo.add"(%19, %33) : (tensor<1x1x2xf32>, tensor<1x1x2xf32>) -> tensor<1x1x2xf32>
    %35 = "stablehlo.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
    %36 = "stablehlo.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
    %37 = "stablehlo.dot_general"(%32, %2) {dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [0, 1], rhs_batching_dimensions = [0, 1], lhs_contracting_dimensions = [3], rhs_contracting_dimensions = [2]>, precision_config = [#stablehlo<precision HIGH>, #stablehlo<precision HIGH>]} : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
    "func.return"(%37, %34, %35, %36) : (tensor<1x1x2x2xf32>, tensor<1x1x2xf32>, tensor<i64>, tensor<i64>) -> ()
  }
}
// aten::convolution, precision DEFAULT
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<1x1x4xf32>, %1: tensor<1x1x2xf32>) -> (tensor<1x1x3xf32>) {
    %2 = "stablehlo.convolution"(%0, %1) {batch_group_count = 1 : i64, dimension_numbers = #stablehlo.conv<[b, f, 0]x[o, i, 0]->[b, f, 0]>, feature_group_count = 1 : i64, lhs_dilation = array<i64: 1>, padding = dense<[[0, 0]]> : tensor<1x2xi64>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>], rhs_dilation = array<i64: 1>, window_strides = array<i64: 1>} : (tensor<1x1x4xf32>, tensor<1x1x2xf32>) -> tensor<1x1x3xf32>
    "func.return"(%2) : (tensor<1x1x3xf32>) -> ()
  }
}
// aten::_grouped_mm, precision HIGH
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<4x2xf32>, %1: tensor<2x2x3xf32>, %2: tensor<2xi32>) -> (tensor<4x3xf32>) {
    %3 = "stablehlo.convert"(%2) : (tensor<2xi32>) -> tensor<2xi64>
    %4 = "stablehlo.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
    %5 = "stablehlo.pad"(%3, %4) {edge_padding_low = array<i64: 1>, edge_padding_high = array<i64: -1>, interior_padding = array<i64: 0>} : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
    %6 = "stablehlo.constant"() {value = dense<4> : tensor<i64>} : () -> tensor<i64>
    %7 = "stablehlo.broadcast_in_dim"(%6) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<2xi64>
    %8 = "stablehlo.compare"(%3, %7) {comparison_direction = #stablehlo<comparison_direction GT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi1>
    %9 = "stablehlo.compare"(%3, %5) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi1>
    %10 = "stablehlo.or"(%9, %8) : (tensor<2xi1>, tensor<2xi1>) -> tensor<2xi1>
    %11 = "stablehlo.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
    %12 = "stablehlo.broadcast_in_dim"(%11) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<2xi64>
    %13 = "stablehlo.compare"(%3, %12) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi1>
    %14 = "stablehlo.or"(%10, %13) : (tensor<2xi1>, tensor<2xi1>) -> tensor<2xi1>
    %15 = "stablehlo.constant"() {value = dense<false> : tensor<i1>} : () -> tensor<i1>
    %19 = "stablehlo.reduce"(%14, %15) ({
    ^bb0(%16: tensor<i1>, %17: tensor<i1>):
      %18 = "stablehlo.or"(%16, %17) : (tensor<i1>, tensor<i1>) -> tensor<i1>
      "stablehlo.return"(%18) : (tensor<i1>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<2xi1>, tensor<i1>) -> tensor<i1>
    %20 = "stablehlo.subtract"(%3, %5) : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
    %21 = "chlo.ragged_dot"(%0, %1, %20) {ragged_dot_dimension_numbers = #chlo.ragged_dot<lhs_batching_dimensions = [], rhs_batching_dimensions = [], lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1], lhs_ragged_dimensions = [0], rhs_group_dimensions = [0]>, precision_config = [#chlo<precision HIGH>, #chlo<precision HIGH>]} : (tensor<4x2xf32>, tensor<2x2x3xf32>, tensor<2xi64>) -> tensor<4x3xf32>
    "func.return"(%21) : (tensor<4x3xf32>) -> ()
  }
}
