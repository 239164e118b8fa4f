// aten::add.Tensor
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<4xf32>, %1: tensor<4xf32>, %2: tensor<f32>) -> (tensor<4xf32>) {
    %3 = "stablehlo.broadcast_in_dim"(%2) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %4 = "stablehlo.multiply"(%1, %3) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %5 = "stablehlo.add"(%0, %4) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%5) : (tensor<4xf32>) -> ()
  }
}
// aten::div.Tensor_mode
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<4xi64>, %1: tensor<4xi64>) -> (tensor<4xi64>) {
    %2 = "stablehlo.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
    %3 = "stablehlo.broadcast_in_dim"(%2) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<4xi64>
    %4 = "stablehlo.compare"(%1, %3) {comparison_direction = #stablehlo<comparison_direction EQ>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi1>
    %5 = "stablehlo.constant"() {value = dense<false> : tensor<i1>} : () -> tensor<i1>
    %9 = "stablehlo.reduce"(%4, %5) ({
    ^bb0(%6: tensor<i1>, %7: tensor<i1>):
      %8 = "stablehlo.or"(%6, %7) : (tensor<i1>, tensor<i1>) -> tensor<i1>
      "stablehlo.return"(%8) : (tensor<i1>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<4xi1>, tensor<i1>) -> tensor<i1>
    %10 = "stablehlo.divide"(%0, %1) : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
    %11 = "stablehlo.remainder"(%0, %1) : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
    %12 = "stablehlo.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
    %13 = "stablehlo.broadcast_in_dim"(%12) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<4xi64>
    %14 = "stablehlo.compare"(%1, %13) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi1>
    %15 = "stablehlo.compare"(%0, %13) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi1>
    %16 = "stablehlo.compare"(%15, %14) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type UNSIGNED>} : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
    %17 = "stablehlo.compare"(%11, %13) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi1>
    %18 = "stablehlo.and"(%17, %16) : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
    %19 = "stablehlo.constant"() {value = dense<1> : tensor<i64>} : () -> tensor<i64>
    %20 = "stablehlo.broadcast_in_dim"(%19) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<4xi64>
    %21 = "stablehlo.subtract"(%10, %20) : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
    %22 = "stablehlo.select"(%18, %21, %10) : (tensor<4xi1>, tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
    "func.return"(%22) : (tensor<4xi64>) -> ()
  }
}
// aten::sigmoid
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<4xbf16>) -> (tensor<4xbf16>) {
    %1 = "stablehlo.convert"(%0) : (tensor<4xbf16>) -> tensor<4xf32>
    %2 = "stablehlo.logistic"(%1) : (tensor<4xf32>) -> tensor<4xf32>
    %3 = "stablehlo.convert"(%2) : (tensor<4xf32>) -> tensor<4xbf16>
    "func.return"(%3) : (tensor<4xbf16>) -> ()
  }
}
// aten::pow.Tensor_Scalar
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<4xf32>) -> (tensor<4xf32>) {
    %1 = "stablehlo.multiply"(%0, %0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%1) : (tensor<4xf32>) -> ()
  }
}
// aten::pow.Tensor_Scalar
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<4xbf16>) -> (tensor<4xbf16>) {
    %1 = "stablehlo.convert"(%0) : (tensor<4xbf16>) -> tensor<4xf32>
    %2 = "stablehlo.multiply"(%1, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %3 = "stablehlo.convert"(%2) : (tensor<4xf32>) -> tensor<4xbf16>
    %4 = "stablehlo.convert"(%3) : (tensor<4xbf16>) -> tensor<4xf32>
    %5 = "stablehlo.multiply"(%4, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %6 = "stablehlo.convert"(%5) : (tensor<4xf32>) -> tensor<4xbf16>
    "func.return"(%6) : (tensor<4xbf16>) -> ()
  }
}
// aten::pow.Tensor_Scalar
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<4xf32>, %1: tensor<f32>) -> (tensor<4xf32>) {
    %2 = "stablehlo.broadcast_in_dim"(%1) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %3 = "stablehlo.power"(%0, %2) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%3) : (tensor<4xf32>) -> ()
  }
}
